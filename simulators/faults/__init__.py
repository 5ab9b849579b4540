"""Fault injection for tests and benchmarks (issue 18): a TCP proxy that
drops, refuses or silences a service's broker connection (`proxy`), an
LD_PRELOAD shim that models a power cut and fails a disk on demand
(`faultfs`), a small real disk to fill (`disk`), an acknowledged load with
its accounting (`load`), and the pipeline of real processes they act on
(`rig`)."""
