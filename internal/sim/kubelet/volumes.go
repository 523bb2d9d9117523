package kubelet

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
)

// ServiceAccountMountPath is where Kubernetes pods find their service-account credentials.
const ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// rootCAConfigMap is the ConfigMap every namespace gets with the cluster's CA; projected
// volumes of service-account credentials read it.
const rootCAConfigMap = "kube-root-ca.crt"

// setupVolumes makes the host directory (or file) of every volume of the pod and returns them
// by volume name:
//   - hostPath: <nodeDir>/<path> (directories are created unless the type names a file, socket
//     or device, for which only the parent is created);
//   - emptyDir, configMap, secret, downwardAPI, projected: a directory of the pod, with the
//     files written once at start;
//   - anything else: an empty directory, with a warning event.
func (w *podWorker) setupVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.HostPath != nil:
			host := OnNode(w.n.dir, v.HostPath.Path)
			if err := makeHostPath(host, v.HostPath.Type); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			out[v.Name] = host
			continue
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			files, err := w.configMapFiles(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, files, mode(v.ConfigMap.DefaultMode)); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Secret != nil:
			files, err := w.secretFiles(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, files, mode(v.Secret.DefaultMode)); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.DownwardAPI != nil:
			files, err := w.downwardFiles(pod, v.DownwardAPI.Items)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, files, mode(v.DownwardAPI.DefaultMode)); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Projected != nil:
			if err := w.projectedVolume(ctx, pod, dir, v.Projected); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		default:
			w.n.recorder.Eventf(pod, corev1.EventTypeWarning, "VolumeNotSimulated",
				"Volume %s is not simulated: the containers get an empty directory", v.Name)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		out[v.Name] = dir
	}
	return out, nil
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m) & 0o777
}

func makeHostPath(host string, t *corev1.HostPathType) error {
	kind := corev1.HostPathUnset
	if t != nil {
		kind = *t
	}
	switch kind {
	case corev1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(host, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	case corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
		return os.MkdirAll(filepath.Dir(host), 0o755)
	default:
		return os.MkdirAll(host, 0o755)
	}
}

// writeFiles writes files (relative path → content) below dir.
func writeFiles(dir string, files map[string][]byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for rel, data := range files {
		clean := path.Clean("/" + rel)[1:]
		if clean == "" || strings.HasPrefix(clean, "..") {
			return fmt.Errorf("bad file path %q", rel)
		}
		p := filepath.Join(dir, clean)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writePodFile(p, data, perm); err != nil {
			return err
		}
	}
	return nil
}

func selectKeys[V any](data map[string]V, items []corev1.KeyToPath, conv func(V) []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = conv(v)
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("no key %q", it.Key)
		}
		out[it.Path] = conv(v)
	}
	return out, nil
}

func (w *podWorker) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	cm, err := w.k.configMap(ctx, ns, name)
	if apierrors.IsNotFound(err) && name == rootCAConfigMap {
		// The CA publisher may not run in a simulated cluster: the kubelet knows the CA.
		return selectKeys(map[string][]byte{"ca.crt": w.k.cfg.APIServerCA}, items, func(b []byte) []byte { return b })
	}
	if apierrors.IsNotFound(err) && isTrue(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	files, err := selectKeys(cm.Data, items, func(s string) []byte { return []byte(s) })
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	bin, err := selectKeys(cm.BinaryData, nil, func(b []byte) []byte { return b })
	if err == nil && len(items) == 0 {
		for k, v := range bin {
			files[k] = v
		}
	}
	return files, nil
}

func (w *podWorker) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	s, err := w.k.secret(ctx, ns, name)
	if apierrors.IsNotFound(err) && isTrue(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	files, err := selectKeys(s.Data, items, func(b []byte) []byte { return b })
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return files, nil
}

func (w *podWorker) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, fmt.Errorf("downward API file %s: only fieldRef is simulated", it.Path)
		}
		v, err := podField(pod, it.FieldRef.FieldPath, w.addresses())
		if err != nil {
			return nil, err
		}
		out[it.Path] = []byte(v)
	}
	return out, nil
}

// projectedVolume writes the sources of a projected volume; service-account tokens are
// requested for the pod and renewed with the others.
func (w *podWorker) projectedVolume(ctx context.Context, pod *corev1.Pod, dir string, v *corev1.ProjectedVolumeSource) error {
	perm := mode(v.DefaultMode)
	for _, s := range v.Sources {
		var files map[string][]byte
		var err error
		switch {
		case s.ConfigMap != nil:
			files, err = w.configMapFiles(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional)
		case s.Secret != nil:
			files, err = w.secretFiles(ctx, pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional)
		case s.DownwardAPI != nil:
			files, err = w.downwardFiles(pod, s.DownwardAPI.Items)
		case s.ServiceAccountToken != nil:
			t := s.ServiceAccountToken
			exp := ptr.Deref(t.ExpirationSeconds, projectedTokenExpiration)
			var aud []string
			if t.Audience != "" {
				aud = []string{t.Audience}
			}
			err = w.tokens.add(ctx, filepath.Join(dir, t.Path), aud, exp)
		default:
			err = fmt.Errorf("unsupported projected source")
		}
		if err != nil {
			return err
		}
		if err := writeFiles(dir, files, perm); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o755)
}
