package debugbundle

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"cdplane/internal/kubeletplugin"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
)

// NodeFilesCommand is the command run in a kubelet plugin's container (the image holds the
// cdplane binary beside the plugin's) to read its checkpoint and CDI specs: it writes them to
// stdout as a tar (WriteNodeFiles), with --state-dir and --cdi-root as the plugin's.
var NodeFilesCommand = []string{"cdplane", "debug", "node-files"}

// maxNodeFileBytes bounds each file read from a node.
const maxNodeFileBytes = 16 << 20

// WriteNodeFiles writes to w, as a tar, the kubelet plugin's files support needs: in stateDir
// the checkpoint (and any unreadable one kept aside), as checkpoint/<name>; in cdiRoot the CDI
// specs the plugin wrote (named by its vendor), as cdi/<name>. Other files are left alone. A
// directory that does not exist is no error.
func WriteNodeFiles(w io.Writer, stateDir, cdiRoot string) error {
	tw := tar.NewWriter(w)
	add := func(dir, prefix, into string) error {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading directory %s: %w", dir, err)
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			data, err := readCapped(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Name: into + "/" + e.Name(), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
				return fmt.Errorf("writing %s: %w", e.Name(), err)
			}
			if _, err := tw.Write(data); err != nil {
				return fmt.Errorf("writing %s: %w", e.Name(), err)
			}
		}
		return nil
	}
	if err := add(stateDir, checkpoint.File, "checkpoint"); err != nil {
		return err
	}
	if err := add(cdiRoot, cdi.Vendor, "cdi"); err != nil {
		return err
	}
	return tw.Close()
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxNodeFileBytes))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

// NodeFile is one file of WriteNodeFiles's tar.
type NodeFile struct {
	Name string
	Data []byte
}

// ReadNodeFiles reads WriteNodeFiles's tar.
func ReadNodeFiles(r io.Reader) ([]NodeFile, error) {
	var files []NodeFile
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("reading the node's files: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxNodeFileBytes))
		if err != nil {
			return files, fmt.Errorf("reading %s of the node's files: %w", hdr.Name, err)
		}
		files = append(files, NodeFile{Name: hdr.Name, Data: data})
	}
}

// pluginArg returns the value of a kubelet plugin flag ("--name=v" or "--name v") of a pod's
// container, or def.
func pluginArg(ct *corev1.Container, name, def string) string {
	args := append(slices.Clone(ct.Command), ct.Args...)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"=")
		case a == "--"+name && i+1 < len(args):
			return args[i+1]
		}
	}
	return def
}

// pluginContainer returns the container running the kubelet plugin: the one whose command is
// cdplane-kubelet-plugin, else the first.
func pluginContainer(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.Containers {
		if ct := &p.Spec.Containers[i]; len(ct.Command) > 0 && filepath.Base(ct.Command[0]) == "cdplane-kubelet-plugin" {
			return ct
		}
	}
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	return &p.Spec.Containers[0]
}

// nodeDir is where a node's files go in the bundle.
func nodeDir(p *corev1.Pod) string {
	node := p.Spec.NodeName
	if node == "" {
		node = "unscheduled"
	}
	return "nodes/" + node + "/"
}

// pluginFiles copies a kubelet plugin's checkpoint and CDI specs into the bundle.
func (c *collector) pluginFiles(ctx context.Context, p *corev1.Pod) error {
	dir := nodeDir(p) + "kubelet-plugin/"
	ct := pluginContainer(p)
	if ct == nil {
		return nil
	}
	cmd := append(slices.Clone(NodeFilesCommand),
		"--state-dir", pluginArg(ct, "state-dir", kubeletplugin.DefaultPluginDataDir),
		"--cdi-root", pluginArg(ct, "cdi-root", kubeletplugin.DefaultCDIRoot))
	out, err := c.exec(ctx, p, ct.Name, cmd)
	if err != nil {
		c.a.Fail(dir, fmt.Errorf("reading the checkpoint and CDI specs of kubelet plugin %s/%s: %w", p.Namespace, p.Name, err))
		return nil
	}
	files, err := ReadNodeFiles(bytes.NewReader(out))
	if err != nil {
		c.a.Fail(dir, fmt.Errorf("kubelet plugin %s/%s: %w", p.Namespace, p.Name, err))
	}
	for _, f := range files {
		if err := c.a.Add(dir+f.Name, "from kubelet plugin "+p.Namespace+"/"+p.Name, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// imexNodes runs `nvidia-imex-ctl -N` in an IMEX daemon's container: the daemon's view of its
// domain's nodes and their connections.
func (c *collector) imexNodes(ctx context.Context, p *corev1.Pod) error {
	name := nodeDir(p) + "imex/" + p.Name + ".nvidia-imex-ctl-N.txt"
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	out, err := c.exec(ctx, p, p.Spec.Containers[0].Name, []string{devices.ContainerIMEXCtlBinary, "-N"})
	if err != nil {
		c.a.Fail(name, fmt.Errorf("running nvidia-imex-ctl -N in daemon pod %s/%s: %w", p.Namespace, p.Name, err))
		if len(out) == 0 {
			return nil
		}
	}
	return c.a.Add(name, "nvidia-imex-ctl -N in daemon pod "+p.Namespace+"/"+p.Name, out)
}

// exec runs cmd in a container of a running pod and returns its stdout; on failure the error
// carries its stderr.
func (c *collector) exec(ctx context.Context, p *corev1.Pod, container string, cmd []string) ([]byte, error) {
	if p.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("pod is not running (phase %q)", p.Status.Phase)
	}
	if c.execRT == nil {
		return nil, errors.New("no transport for pods/exec")
	}
	u := c.o.Clientset.CoreV1().RESTClient().Get().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, clientgoscheme.ParameterCodec).URL()
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	stdout, stderr, err := execWebSocket(ctx, c.execRT, u)
	if err != nil {
		if msg := strings.TrimSpace(string(stderr)); msg != "" {
			return stdout, fmt.Errorf("%s: %w (stderr: %s)", strings.Join(cmd, " "), err, msg)
		}
		return stdout, fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
	}
	return stdout, nil
}
