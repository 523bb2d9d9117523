//go:build linux

package kubeletplugin

import "golang.org/x/sys/unix"

// mknodChar creates a character device node readable and writable by everyone, as the NVIDIA
// driver creates its capability devices.
func mknodChar(path string, major, minor uint32) error {
	return unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor)))
}
