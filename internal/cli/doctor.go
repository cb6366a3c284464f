package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/doctor"
)

// DoctorUsage is `gpucache doctor --help`.
const DoctorUsage = `Usage: gpucache doctor [--json] [--probe-timeout D] [gpucached's flags]

Tells what this machine and this node's configuration can do, one line per
check: CPU features (SHA-NI, AES-NI, AVX2), memory and huge pages,
RLIMIT_NOFILE and RLIMIT_MEMLOCK against the config, NUMA, RDMA devices,
GPUs, NVMe, BlueField, the configured S3 bucket and etcd endpoints
(reachability and measured latency), the clock against etcd, and the expiry
of tls_cert, tls_client_ca and etcd_cert.

Each line is OK, WARN, FAIL, ABSENT or NOT_RUN_HARDWARE, with the reason:
  WARN              gpucached would run, degraded or at risk
  FAIL              gpucached would refuse to start with this config, or start
                    and fail what it asks (no etcd endpoint answers, an expired
                    certificate, a clock outside replay_max_future)
  ABSENT            the hardware or the configured service is not there
  NOT_RUN_HARDWARE  the hardware is there, but no path of this build runs on it

It reads the node's configuration as gpucached does: --config FILE (or
GPUCACHE_CONFIG), GPUCACHE_* environment variables, then gpucached's flags
(gpucached --help lists them). Run it as the user and with the config that
gpucached runs with.

Flags:
  --json              print {"checks":[{"name","status","detail",...}]}
  --probe-timeout D   bound on each network probe (default 3s)

Exit codes: 0 no check FAILed (WARN, ABSENT and NOT_RUN_HARDWARE do not fail);
1 a check FAILed; 2 usage error.
`

// runDoctor splits doctor's own flags from gpucached's, loads the config
// as gpucached does and prints the report.
func runDoctor(ctx context.Context, args []string, std Stdio) error {
	return doctorWith(ctx, args, std, os.LookupEnv, doctor.Env{})
}

func doctorWith(ctx context.Context, args []string, std Stdio, getenv func(string) (string, bool), env doctor.Env) error {
	asJSON := false
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			continue
		}
		switch name {
		case "h", "help":
			fmt.Fprint(std.Out, DoctorUsage)
			return flag.ErrHelp
		case "json":
			asJSON = !hasVal || val == "true"
		case "probe-timeout":
			if !hasVal {
				if i+1 >= len(args) {
					return UsageErr("--probe-timeout needs a duration, e.g. 3s")
				}
				i++
				val = args[i]
			}
			d, err := probeTimeout(val)
			if err != nil {
				return err
			}
			env.Timeout = d
		default:
			rest = append(rest, a)
		}
	}
	cfg, err := config.Load(rest, getenv, io.Discard)
	if err != nil && !errors.Is(err, config.ErrInvalid) {
		// A flag gpucached does not know, or a malformed value.
		return UsageErr("%v", err)
	}
	if env.Getenv == nil {
		env.Getenv = getenv // the secrets' environment variables, as config.Load read it
	}
	rep := doctor.Run(ctx, cfg, err, env)
	if asJSON {
		err = rep.WriteJSON(std.Out)
	} else {
		err = rep.WriteText(std.Out)
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		// Exit 1, the report being the message: errMiss gives the code,
		// ErrReported keeps reportErr from printing a line of its own.
		return errors.Join(errMiss, ErrReported)
	}
	return nil
}

// probeTimeout parses the value of --probe-timeout: a positive duration.
func probeTimeout(val string) (time.Duration, error) {
	d, err := time.ParseDuration(val)
	if err != nil || d <= 0 {
		return 0, UsageErr("--probe-timeout %q is not a positive duration (e.g. 3s)", val)
	}
	return d, nil
}
