package millicpu

import "math"

// MaxCores caps every amount: far above any node (1,048,576 cores), and
// low enough that its millicores fit an int64 with room to add.
const MaxCores = 1 << 20

// epsilon is the float error forgiven at a whole millicore.
const epsilon = 1e-6

// Ceil is cores in whole millicores, rounded up; NaN and values ≤ 0 give
// 0, values above MaxCores (+Inf too) give MaxCores' millicores.
func Ceil(cores float64) int64 {
	if !(cores > 0) {
		return 0
	}
	return int64(math.Ceil(min(cores, MaxCores)*1000 - epsilon))
}

// Floor is cores in whole millicores, rounded down, with Ceil's bounds.
func Floor(cores float64) int64 {
	if !(cores > 0) {
		return 0
	}
	return int64(math.Floor(min(cores, MaxCores)*1000 + epsilon))
}

// Cores is Ceil back in cores: the amount a request of cores is written as.
func Cores(cores float64) float64 { return float64(Ceil(cores)) / 1000 }
