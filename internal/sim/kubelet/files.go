package kubelet

import (
	"io/fs"

	"cdplane/internal/atomicfile"
)

// writePodFile makes path hold data as a reader sees it replaced at once: a temporary file in
// the same directory renamed over path. Unlike atomicfile.Write it does not sync to disk: a
// pod's service-account token, kubeconfig and volume files live on a kubelet's tmpfs, which a
// reboot loses anyway, and a disk flush (two, with the directory) per file was most of the
// simulated kubelet's own CPU while a job's pods started.
func writePodFile(path string, data []byte, perm fs.FileMode) error {
	return atomicfile.WriteVolatile(path, data, perm)
}
