//go:build unix

package state

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked is returned by Lock when another process holds the state
// file's lock: two gateways writing one state file would each overwrite
// the other's counters.
var ErrLocked = errors.New("state: the state file is in use by another process")

// Lock takes an exclusive advisory lock on path+".lock" (created, mode
// 0600), held until the returned function is called or the process ends
// (a crash releases it).
func Lock(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s.lock)", ErrLocked, path)
		}
		return nil, fmt.Errorf("state: lock: %w", err)
	}
	return f.Close, nil
}
