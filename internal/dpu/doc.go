// Package dpu is the BlueField DPU path: the offload hypothesis of ADR 0017
// (docs/adr/0017-storage-queue-offload-hypothesis.md) as code that cannot
// run on this hardware and says so.
//
// The one offload candidate is the storage queue, a DRAM slab plus NVMe
// submit/complete rings, run by an agent on the Arm cores of a
// storage-side BlueField-3, while the GPU client keeps an ordinary NIC.
// Host GPUNetIO NIC mode (a GPU kernel driving the NIC) is not this daemon
// and is not modelled here.
//
// # Hardware honesty
//
// Nothing here links DOCA, SPDK or an NVMe driver, with or without the
// dpu_bf3 build tag:
//
//   - OpenDOCA, OpenSPDK and OpenNVMeDevice refuse in every build. The
//     error wraps ErrNotRunHardware, whose text ends in NOT_RUN_HARDWARE.
//     The tagged build only adds a probe of the device paths and names
//     what it saw; it still opens nothing.
//   - ArmAgent.Start runs the storage queue in simulation and never sets
//     offload_active: Status().OffloadActive is false in every build.
//   - SimQueue round-trips bytes through its submit and complete rings on
//     host memory; every Completion is labelled NOT_RUN_HARDWARE.
//   - AffineQueue binds a queue to its reactor; a mismatched reactor id
//     is refused (ErrReactorMismatch) before anything starts.
//   - The P2P and DPA ablation knobs (Ablation) only print
//     NOT_RUN_HARDWARE: they change no byte that is stored.
//
// Nothing in this package reports a latency, a bandwidth or any other
// number for hardware that nothing here has measured.
//
// # Faults
//
// The offload engine's failpoints live here (docs/FAILURES.md): WithFaults
// wraps a transport.Transport and checks dpu_restart and gpu_reset before
// each Submit reaches the engine.
package dpu
