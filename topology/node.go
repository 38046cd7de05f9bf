package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// parseDistances parses a node*/distance row: one distance per online node,
// in node-id order, separated by spaces.
func parseDistances(s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty distance row")
	}
	if len(fields) > MaxCPUID {
		return nil, fmt.Errorf("distance row of %d entries", len(fields))
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bad distance %q", f)
		}
		out[i] = d
	}
	return out, nil
}
