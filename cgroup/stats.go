package cgroup

// Stats is one sample of a container or pod cgroup. Counters are cumulative
// since the cgroup was created; rates are the caller's business.
type Stats struct {
	// CPUUsageNs is total CPU time (v1 cpuacct.usage, v2 cpu.stat usage_usec).
	CPUUsageNs uint64
	// Periods, ThrottledPeriods and ThrottledNs come from cpu.stat
	// (nr_periods, nr_throttled, throttled_time or throttled_usec). On v2
	// they are absent while the cpu controller is not enabled: HasThrottling.
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledNs      uint64
	HasThrottling    bool

	// MemoryUsage is v1 memory.usage_in_bytes or v2 memory.current.
	MemoryUsage uint64
	// InactiveFile is memory.stat total_inactive_file (v1) or inactive_file (v2).
	InactiveFile uint64
	// WorkingSet is MemoryUsage − InactiveFile (0 if that would be negative),
	// the value the kubelet evicts on and the OOM killer roughly sees.
	WorkingSet uint64
	// MemoryLimit in bytes; meaningless when MemoryUnlimited.
	MemoryLimit     uint64
	MemoryUnlimited bool
	// OOMKills is the oom_kill counter of v1 memory.oom_control (kernel
	// ≥ 4.13) or v2 memory.events.
	OOMKills    uint64
	HasOOMKills bool

	// Pressure stall information from the v2 directory (also on hybrid
	// hosts). HasPSI is false when the files are absent.
	CPUPressure    Pressure
	MemoryPressure Pressure
	IOPressure     Pressure
	HasPSI         bool
}

// Pressure is one *.pressure file. Full is absent for cpu.pressure on
// kernels before 5.13 (HasFull false).
type Pressure struct {
	Some    PressureLine
	Full    PressureLine
	HasFull bool
}

// PressureLine is one line of a PSI file. Averages are percentages in
// hundredths (1234 = 12.34 %), as the kernel prints them, so reading needs no
// float parsing.
type PressureLine struct {
	Avg10, Avg60, Avg300 uint64
	TotalUs              uint64
}
