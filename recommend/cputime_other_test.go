//go:build !linux

package recommend

func processCPUSeconds() float64 { return 0 }
