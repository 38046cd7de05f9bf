//go:build linux

package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// readBlockMQ reads <sys>/block/*/mq/*/cpu_list: the CPUs mapped to each
// blk-mq hardware queue. Devices without mq (or no /sys/block) are skipped.
func readBlockMQ(sysRoot string) ([]BlockQueue, error) {
	blockRoot := filepath.Join(sysRoot, "block")
	devs, err := os.ReadDir(blockRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRead, blockRoot, err)
	}
	var out []BlockQueue
	for _, d := range devs {
		mq := filepath.Join(blockRoot, d.Name(), "mq")
		queues, err := os.ReadDir(mq)
		if err != nil {
			continue // not a blk-mq device, or a dangling link in a capture
		}
		for _, q := range queues {
			n, err := strconv.Atoi(q.Name())
			if err != nil || n < 0 {
				continue
			}
			path := filepath.Join(mq, q.Name(), "cpu_list")
			b, err := readBounded(path, maxSmallFile)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			set, err := parseBlockCPUList(b)
			if err != nil {
				return nil, parseErr(path, string(b), err)
			}
			out = append(out, BlockQueue{Device: d.Name(), Queue: n, CPUs: set})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Queue < out[j].Queue
	})
	return out, nil
}
