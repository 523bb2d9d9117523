package kubelet

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"cdplane/internal/sim/imexsim"
)

// containerSpec resolves a container for its next instance and opens its log.
func (w *podWorker) containerSpec(ctx context.Context, c *ctr) (*instance, error) {
	pod := w.currentPod()
	addrs := w.addresses()
	env, err := resolveEnv(ctx, pod, &c.c, addrs, kubeletSource{w.k})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	kubeconfig := w.kubeconfig
	w.mu.Unlock()
	mounts, pm, err := w.containerMounts(c)
	if err != nil {
		return nil, err
	}

	env = mergeEnv(env, c.edits.Env...)
	values := make(map[string]string, len(env))
	for _, e := range env {
		values[e.Name] = e.Value
	}
	lookup := func(k string) (string, bool) { v, ok := values[k]; return v, ok }
	for i := range env {
		env[i].Value = pm.Value(env[i].Value)
	}
	// What the node's host gives every container, already in host paths: the host's own
	// variables (Config.HostEnv), the simulated IMEX's stand-ins, the container's view among
	// them, and the simulated IMEX's settings forwarded from this process's environment.
	env = mergeEnv(env, standInEnv(pm, addrs.PodIP)...)
	env = mergeEnv(env, EnvVar{Name: imexsim.ContainerPathsEnv, Value: containerPaths(mounts, c.edits.Devices)})
	env = mergeEnv(env, simulatedHostSettings(os.LookupEnv)...)
	if w.k.cfg.HostEnv != nil {
		env = mergeEnv(env, w.k.cfg.HostEnv(w.n.spec.Name, w.k.NodeDir(w.n.spec.Name))...)
	}
	if _, set := values["KUBECONFIG"]; kubeconfig != "" && !set {
		env = append(env, EnvVar{Name: "KUBECONFIG", Value: kubeconfig})
	}
	expandAll := func(in []string) []string {
		if in == nil {
			return nil
		}
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = pm.Value(expand(s, lookup))
		}
		return out
	}
	workDir := w.dir
	if c.c.WorkingDir != "" {
		if p, ok := pm.Path(c.c.WorkingDir); ok {
			workDir = p
		}
	}
	c.mu.Lock()
	n := c.restarts
	c.mu.Unlock()
	logPath := w.logPathFor(c.c.Name, n)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	spec := &ContainerSpec{
		Pod: w.key, PodUID: w.uid, Node: w.n.spec.Name, Name: c.c.Name, Image: c.c.Image,
		Init: c.init && !c.sidecar, Command: expandAll(c.c.Command), Args: expandAll(c.c.Args),
		Env: env, WorkingDir: workDir, Devices: c.edits.Devices, Mounts: mounts,
		PodIP: addrs.PodIP, Annotations: pod.Annotations, Log: logf,
	}
	return &instance{spec: spec, paths: pm, env: values, log: logf, path: logPath}, nil
}

// containerMounts lists a container's mounts (volume mounts, the service-account directory,
// CDI mounts) and the path map of its mounts and devices.
func (w *podWorker) containerMounts(c *ctr) ([]Mount, *PathMap, error) {
	w.mu.Lock()
	volumes, saDir := w.volumes, w.saDir
	w.mu.Unlock()

	var mounts []Mount
	for _, vm := range c.c.VolumeMounts {
		host, ok := volumes[vm.Name]
		if !ok {
			return nil, nil, fmt.Errorf("volume mount %s: no volume %q", vm.MountPath, vm.Name)
		}
		if vm.SubPath != "" {
			host = filepath.Join(host, path.Clean("/"+vm.SubPath))
			if err := os.MkdirAll(host, 0o755); err != nil {
				return nil, nil, err
			}
		}
		mounts = append(mounts, Mount{ContainerPath: vm.MountPath, HostPath: host, ReadOnly: vm.ReadOnly})
	}
	if !hasMount(mounts, EtcHostsPath) {
		mounts = append(mounts, Mount{ContainerPath: EtcHostsPath, HostPath: w.hostsFilePath()})
	}
	if !hasMount(mounts, EtcResolvConfPath) {
		mounts = append(mounts, Mount{ContainerPath: EtcResolvConfPath, HostPath: w.resolvConfPath()})
	}
	if saDir != "" && !hasMount(mounts, ServiceAccountMountPath) {
		mounts = append(mounts, Mount{ContainerPath: ServiceAccountMountPath, HostPath: saDir, ReadOnly: true})
	}
	mounts = replaceMounts(mounts, c.edits.Mounts)
	mappings := make([]PathMapping, 0, len(mounts)+len(c.edits.Devices))
	for _, m := range mounts {
		mappings = append(mappings, PathMapping{ContainerPath: m.ContainerPath, HostPath: m.HostPath})
	}
	for _, d := range c.edits.Devices {
		mappings = append(mappings, PathMapping(d))
	}
	return mounts, NewPathMap(mappings), nil
}

// standInEnv is what a container's programs that stand for a host's (the simulated IMEX) need
// to know of the host: where the container's /etc/hosts and /etc/resolv.conf lie, so that they
// resolve names as the container's resolver would, and the addresses of the container's network
// interfaces (the pod's IP; a hostNetwork pod's is its node's), since every loopback address is
// local on the simulator's machine. pm maps the container's paths to the host's.
func standInEnv(pm *PathMap, podIP string) []EnvVar {
	var env []EnvVar
	if hosts, ok := pm.Path(EtcHostsPath); ok {
		env = append(env, EnvVar{Name: imexsim.HostsFileEnv, Value: hosts})
	}
	if resolvConf, ok := pm.Path(EtcResolvConfPath); ok {
		env = append(env, EnvVar{Name: imexsim.ResolvConfEnv, Value: resolvConf})
	}
	if podIP != "" {
		env = append(env, EnvVar{Name: imexsim.LocalAddrsEnv, Value: podIP})
	}
	return env
}

// containerPaths is the container's view, told to the programs that stand for a host's in
// imexsim.ContainerPathsEnv (imexsim.EncodeContainerPaths: a JSON object of container path to
// host path): its mounts, then its device nodes, a device replacing a mount at the same path.
// A device node whose host file does not exist on the node is left out, as a container runtime
// fails to create it; so are paths that are not absolute.
func containerPaths(mounts []Mount, devices []Device) string {
	paths := make(map[string]string, len(mounts)+len(devices))
	for _, m := range mounts {
		if path.IsAbs(m.ContainerPath) && filepath.IsAbs(m.HostPath) {
			paths[path.Clean(m.ContainerPath)] = filepath.Clean(m.HostPath)
		}
	}
	for _, d := range devices {
		if !path.IsAbs(d.ContainerPath) || !filepath.IsAbs(d.HostPath) {
			continue
		}
		if _, err := os.Stat(d.HostPath); err != nil {
			continue
		}
		paths[path.Clean(d.ContainerPath)] = filepath.Clean(d.HostPath)
	}
	return imexsim.EncodeContainerPaths(paths)
}

// forwardedSettings are the simulated IMEX's settings that the simulated kubelet passes from
// its own environment (set for `cdplane sim up`) to every container, as settings of the
// simulated hosts.
var forwardedSettings = []string{imexsim.ShutdownDelayEnv}

// simulatedHostSettings is the forwardedSettings set in the environment lookup reads.
func simulatedHostSettings(lookup func(string) (string, bool)) []EnvVar {
	var env []EnvVar
	for _, k := range forwardedSettings {
		if v, ok := lookup(k); ok {
			env = append(env, EnvVar{Name: k, Value: v})
		}
	}
	return env
}

func hasMount(ms []Mount, p string) bool {
	for _, m := range ms {
		if path.Clean(m.ContainerPath) == p {
			return true
		}
	}
	return false
}

// replaceMounts adds extra to ms, an extra mount replacing one at the same container path.
func replaceMounts(ms []Mount, extra []Mount) []Mount {
	out := append([]Mount{}, ms...)
	for _, e := range extra {
		out = slices.DeleteFunc(out, func(m Mount) bool { return path.Clean(m.ContainerPath) == path.Clean(e.ContainerPath) })
		out = append(out, e)
	}
	return out
}

// EtcHostsPath is the container path of the pod's hosts file, which the kubelet manages.
const EtcHostsPath = "/etc/hosts"

// hostsFilePath is where the pod's hosts file lies on the host.
func (w *podWorker) hostsFilePath() string { return filepath.Join(w.dir, "etc-hosts") }

// writeHostsFile writes the pod's hosts file once, as the kubelet does when it creates the
// sandbox: localhost and the pod's own name. Containers may rewrite it; a container restart
// keeps what they wrote.
func (w *podWorker) writeHostsFile(pod *corev1.Pod) error {
	path := w.hostsFilePath()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	content := fmt.Sprintf("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n",
		w.addresses().PodIP, pod.Name)
	return os.WriteFile(path, []byte(content), 0o644)
}
