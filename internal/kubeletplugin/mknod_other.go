//go:build !linux

package kubeletplugin

import "errors"

func mknodChar(string, uint32, uint32) error {
	return errors.New("creating device nodes is only supported on Linux")
}
