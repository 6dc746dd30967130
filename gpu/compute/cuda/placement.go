package cuda

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// This file maps the GPU an actor was placed on (a node's NVML index and
// UUID) to the CUDA device this process sees. gpu/compute/backends decides
// whether an actor computes here at all.

// ErrNoSuchGPU reports a placement GPU that the CUDA driver does not show
// this process.
var ErrNoSuchGPU = errors.New("cuda: the placed GPU is not visible")

// OpenPlaced opens the CUDA device that node GPU idx (NVML index, and its
// UUID when known) is in this process: found by UUID among the devices the
// driver shows, so CUDA_VISIBLE_DEVICES and CUDA's own device order cannot
// point it at another GPU; without a UUID, mapped as CUDA_VISIBLE_DEVICES
// maps indices. Errors name the GPU and wrap ErrUnavailable or ErrNoSuchGPU.
func OpenPlaced(idx int, uuid string) (*Backend, error) {
	ordinal, err := ordinalFor(idx, uuid, os.Getenv("CUDA_VISIBLE_DEVICES"))
	if err != nil {
		return nil, placedErr(idx, uuid, err)
	}
	b, err := New(ordinal)
	if err != nil {
		return nil, placedErr(idx, uuid, err)
	}
	return b, nil
}

func placedErr(idx int, uuid string, err error) error {
	if uuid != "" {
		return fmt.Errorf("GPU %d (%s): %w", idx, uuid, err)
	}
	return fmt.Errorf("GPU %d: %w", idx, err)
}

// ordinalFor maps a node GPU (NVML index, UUID) to the CUDA ordinal that
// names it in this process. With a UUID it asks the driver for every
// visible device's UUID and takes the match. Without one it maps the index
// the way CUDA_VISIBLE_DEVICES does: the index's position in the list, or
// the index itself when the variable is unset.
func ordinalFor(idx int, uuid, visible string) (int, error) {
	if uuid != "" {
		api, err := loadDriver()
		if err != nil {
			return 0, err
		}
		uuids, err := deviceUUIDs(api)
		if err != nil {
			return 0, err
		}
		for i, u := range uuids {
			if strings.EqualFold(u, uuid) {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%w: the driver shows %d device(s) (%s), none with that UUID (CUDA_VISIBLE_DEVICES=%q)",
			ErrNoSuchGPU, len(uuids), strings.Join(uuids, ", "), visible)
	}
	return visibleOrdinal(idx, visible)
}

// visibleOrdinal is CUDA_VISIBLE_DEVICES' mapping from a node index to an
// ordinal: unset means identity; otherwise the position of idx in the
// comma-separated list (which, like CUDA, ends at the first invalid entry).
func visibleOrdinal(idx int, visible string) (int, error) {
	if strings.TrimSpace(visible) == "" {
		return idx, nil
	}
	for pos, f := range strings.Split(visible, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			break
		}
		if n == idx {
			return pos, nil
		}
	}
	return 0, fmt.Errorf("%w: CUDA_VISIBLE_DEVICES=%q hides it", ErrNoSuchGPU, visible)
}
