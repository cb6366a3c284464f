package soak

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when the soak dies, so a
// crashed or killed soak leaves no daemon behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// diskUsed returns the bytes in use on the file system holding path.
func diskUsed(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}
