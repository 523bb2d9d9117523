package kubelet

import (
	"context"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// ContainerSpec is one container instance, fully resolved: every path in it is a host path
// (remapped), every $(VAR) expanded, every env source read.
type ContainerSpec struct {
	// Pod and PodUID name the pod; Node the node it runs on.
	Pod    types.NamespacedName
	PodUID types.UID
	Node   string
	// Name is the container's name; Image its image as written in the pod.
	Name  string
	Image string
	// Init is true for an init container that must run to completion (not a sidecar).
	Init bool
	// Command and Args after $(VAR) expansion and path remapping.
	Command []string
	Args    []string
	// Env in order, after CDI edits.
	Env []EnvVar
	// WorkingDir is the remapped working directory, or the pod's directory.
	WorkingDir string
	// Devices and Mounts, container path to host path: volumes, service-account files and CDI
	// edits.
	Devices []Device
	Mounts  []Mount
	// PodIP is the address the container's processes should serve on.
	PodIP string
	// Annotations are the pod's.
	Annotations map[string]string
	// Log receives the container's output.
	Log io.Writer
}

// Environ returns the environment as NAME=value strings.
func (s *ContainerSpec) Environ() []string {
	out := make([]string, len(s.Env))
	for i, e := range s.Env {
		out[i] = e.Name + "=" + e.Value
	}
	return out
}

// ExecResult is the outcome of a command run in a container's context (an exec probe).
type ExecResult struct {
	ExitCode int
	Output   []byte
}

// Handle is a started container instance.
type Handle interface {
	// Done is closed once the instance has exited.
	Done() <-chan struct{}
	// ExitCode is the exit code once Done is closed (128+N for death by signal N).
	ExitCode() int
	// Signal delivers a signal (SIGTERM on graceful termination).
	Signal(sig os.Signal) error
	// Kill ends the instance at once.
	Kill() error
}

// Runner starts containers. Implementations: ProcessRunner (local binaries), NoopRunner
// (records what it was given); an in-process runner (a Go function per image) fits the same
// interface: Start runs the function in a goroutine, Signal cancels its context.
type Runner interface {
	// Start starts one instance of a container. The context bounds Start only; the instance
	// lives until it exits or is killed.
	Start(ctx context.Context, spec *ContainerSpec) (Handle, error)
	// Exec runs command (already remapped) with the container's environment and waits for it
	// or for ctx.
	Exec(ctx context.Context, spec *ContainerSpec, command []string) (ExecResult, error)
}

// Router picks a runner: Loaded for an image loaded into it (ProcessRunner.Images), else by
// image repository (ImageRepository), falling back to Default.
type Router struct {
	Loaded       *ProcessRunner
	ByRepository map[string]Runner
	Default      Runner
}

var _ Runner = (*Router)(nil)

func (r *Router) runner(image string) Runner {
	if r.Loaded != nil {
		if _, ok := r.Loaded.loaded(image); ok {
			return r.Loaded
		}
	}
	if rr, ok := r.ByRepository[ImageRepository(image)]; ok {
		return rr
	}
	if r.Default != nil {
		return r.Default
	}
	return NoopRunner{}
}

// Start starts the container with the runner of its image.
func (r *Router) Start(ctx context.Context, spec *ContainerSpec) (Handle, error) {
	return r.runner(spec.Image).Start(ctx, spec)
}

// Exec runs the command with the runner of the container's image.
func (r *Router) Exec(ctx context.Context, spec *ContainerSpec, command []string) (ExecResult, error) {
	return r.runner(spec.Image).Exec(ctx, spec, command)
}

// NewProcessRouter routes the images named in binaries (image repository to directory of
// binaries) and the images loaded into the directory images (LoadedImageDir; "" for none) to a
// ProcessRunner, and every other image to NoopRunner.
func NewProcessRouter(binaries map[string]string, images string) *Router {
	pr := &ProcessRunner{Binaries: binaries, Images: images}
	r := &Router{Loaded: pr, ByRepository: map[string]Runner{}, Default: NoopRunner{}}
	for repo := range binaries {
		r.ByRepository[repo] = pr
	}
	return r
}

// ImageRepository returns an image reference without its tag and digest:
// "registry:5000/cdplane:v1@sha256:…" → "registry:5000/cdplane".
func ImageRepository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i >= 0 && !strings.Contains(image[i:], "/") {
		image = image[:i]
	}
	return image
}
