package replication

import "syscall"

// Linux honors SO_RCVLOWAT in poll and epoll for TCP since 4.x.
const lowatSupported = true

func setRcvLowat(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
}
