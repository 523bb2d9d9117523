package kubelet

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// EnvVar is one resolved environment variable of a container.
type EnvVar struct {
	Name  string
	Value string
}

// objectSource reads the ConfigMaps and Secrets a pod refers to.
type objectSource interface {
	configMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// podAddresses are the pod's and its node's addresses, for status.podIP and status.hostIP.
type podAddresses struct {
	PodIP  string
	HostIP string
}

// resolveEnv computes a container's environment as the kubelet does: envFrom sources in order
// (each key prefixed), then env entries in order, a later definition replacing an earlier one
// in place; $(NAME) references in values are expanded from the variables defined before.
func resolveEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, addrs podAddresses, src objectSource) ([]EnvVar, error) {
	var env envList
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, pod.Namespace, from, src)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(data) {
			env.set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.set(e.Name, expand(e.Value, env.lookup))
			continue
		}
		v, ok, err := envValueFrom(ctx, pod, e.ValueFrom, addrs, src)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env.set(e.Name, v)
		}
	}
	return env.vars, nil
}

type envList struct {
	vars  []EnvVar
	index map[string]int
}

func (l *envList) set(name, value string) {
	if l.index == nil {
		l.index = map[string]int{}
	}
	if i, ok := l.index[name]; ok {
		l.vars[i].Value = value
		return
	}
	l.index[name] = len(l.vars)
	l.vars = append(l.vars, EnvVar{Name: name, Value: value})
}

func (l *envList) lookup(name string) (string, bool) {
	i, ok := l.index[name]
	if !ok {
		return "", false
	}
	return l.vars[i].Value, true
}

// mergeEnv appends extra to env, an entry of extra replacing one of env with the same name.
func mergeEnv(env []EnvVar, extra ...EnvVar) []EnvVar {
	var l envList
	for _, e := range env {
		l.set(e.Name, e.Value)
	}
	for _, e := range extra {
		l.set(e.Name, e.Value)
	}
	return l.vars
}

func envFromData(ctx context.Context, ns string, from corev1.EnvFromSource, src objectSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := src.configMap(ctx, ns, from.ConfigMapRef.Name)
		if apierrors.IsNotFound(err) && isTrue(from.ConfigMapRef.Optional) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("envFrom ConfigMap %s: %w", from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := src.secret(ctx, ns, from.SecretRef.Name)
		if apierrors.IsNotFound(err) && isTrue(from.SecretRef.Optional) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("envFrom Secret %s: %w", from.SecretRef.Name, err)
		}
		out := make(map[string]string, len(s.Data)+len(s.StringData))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional reference that is missing.
func envValueFrom(ctx context.Context, pod *corev1.Pod, from *corev1.EnvVarSource, addrs podAddresses, src objectSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := podField(pod, from.FieldRef.FieldPath, addrs)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := src.configMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("ConfigMap %s: %w", ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("ConfigMap %s has no key %q", ref.Name, ref.Key)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := src.secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %s: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
		}
		return string(v), true, nil
	}
	return "", false, fmt.Errorf("unsupported valueFrom (only fieldRef, configMapKeyRef and secretKeyRef are simulated)")
}

// podField returns a downward-API field of the pod.
func podField(pod *corev1.Pod, fieldPath string, addrs podAddresses) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return addrs.PodIP, nil
	case "status.podIPs":
		return addrs.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return addrs.HostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if key, ok := subscript(fieldPath, prefix); ok {
			return m[key], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", fieldPath)
}

// subscript parses prefix['key'].
func subscript(fieldPath, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(fieldPath, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// expand replaces $(NAME) with the value of NAME when lookup knows it, leaves unknown
// references as written, and turns $$ into $ (so $$(NAME) stays literal), as Kubernetes does
// for env values, command and args.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func isTrue(b *bool) bool { return b != nil && *b }
