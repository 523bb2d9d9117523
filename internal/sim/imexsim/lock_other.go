//go:build !unix

package imexsim

import "os"

// lockFile does nothing where there is no flock: only runs in this process exclude each other.
func lockFile(*os.File) (held bool, err error) { return false, nil }
