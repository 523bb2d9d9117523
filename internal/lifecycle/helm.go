package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"

	charts "cdplane/deployments/helm"
)

// FieldManager is the field manager of every object Helm writes for cdplane. Helm names it
// after the running binary otherwise: an install by `cdplane`, an upgrade by a renamed binary
// (`cdplane-0.2.0`) or by a program embedding the library were different managers of the
// same fields, and the upgrade's server-side apply failed on conflicts.
const FieldManager = "cdplane"

func init() {
	// Helm reads it at every write; set once, before anything runs.
	kube.ManagedFieldsManager = FieldManager
}

// helmFor returns a Helm action configuration acting in namespace (all namespaces when empty),
// storing releases as Secrets like the helm CLI does, so `helm list` shows them.
func (m *Manager) helmFor(namespace string) (*action.Configuration, error) {
	handler := slog.Handler(slog.DiscardHandler)
	if m.opts.HelmLog != nil {
		handler = slog.NewTextHandler(m.opts.HelmLog, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(handler))
	if err := cfg.Init(m.getter.inNamespace(namespace), namespace, "secret"); err != nil {
		return nil, fmt.Errorf("setting up Helm: %w", err)
	}
	return cfg, nil
}

// release returns the deployed (or last) revision of a release, nil when there is none.
func (m *Manager) release(name, namespace string) (*releasev1.Release, error) {
	cfg, err := m.helmFor(namespace)
	if err != nil {
		return nil, err
	}
	rel, err := action.NewGet(cfg).Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Helm release %s/%s: %w", namespace, name, err)
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("reading Helm release %s/%s: unexpected type %T", namespace, name, rel)
	}
	return r, nil
}

// releaseCheck decides what an install finds in an existing release rel of name in namespace
// (nil: none): "" to install, resume to install over a release whose every revision failed (an
// earlier install that failed halfway: the same install command finishes it, as an upgrade), or
// an error: the release is deployed (what to run instead is the caller's to say), or pending (a
// command is working on it, or was interrupted).
func (m *Manager) releaseCheck(rel *releasev1.Release, name, namespace string) (resume bool, deployed bool, err error) {
	if rel == nil {
		return false, false, nil
	}
	if rel.Info != nil && rel.Info.Status.IsPending() {
		return false, false, fmt.Errorf("the Helm release %s/%s is %s (revision %d): another command is working on it, or one was interrupted; "+
			"if none is running, roll it back (`helm rollback %s -n %s`) or, for a first install, uninstall it (`helm uninstall %s -n %s`), then run this command again",
			namespace, name, rel.Info.Status, rel.Version, name, namespace, name, namespace)
	}
	if rel.Info == nil || rel.Info.Status != rcommon.StatusFailed {
		return false, true, nil
	}
	cfg, err := m.helmFor(namespace)
	if err != nil {
		return false, false, err
	}
	history, err := cfg.Releases.History(name)
	if err != nil {
		return false, false, fmt.Errorf("reading the history of Helm release %s/%s: %w", namespace, name, err)
	}
	for _, h := range history {
		r, ok := h.(*releasev1.Release)
		if ok && r.Info != nil && (r.Info.Status == rcommon.StatusDeployed || r.Info.Status == rcommon.StatusSuperseded) {
			return false, true, nil
		}
	}
	return true, false, nil
}

// releaseState describes a release as it is now, for the message of a command that failed
// halfway: "" when there is none, or it cannot be read.
func (m *Manager) releaseState(name, namespace string) string {
	rel, err := m.release(name, namespace)
	if err != nil || rel == nil || rel.Info == nil {
		return ""
	}
	return fmt.Sprintf("Helm release %s/%s is at revision %d, %s", namespace, name, rel.Version, rel.Info.Status)
}

// releasesOfChart lists the releases of a chart in every namespace.
func (m *Manager) releasesOfChart(chart string) ([]*releasev1.Release, error) {
	cfg, err := m.helmFor("")
	if err != nil {
		return nil, err
	}
	list := action.NewList(cfg)
	list.AllNamespaces = true
	list.StateMask = action.ListAll
	rels, err := list.Run()
	if err != nil {
		return nil, fmt.Errorf("listing Helm releases: %w", err)
	}
	var out []*releasev1.Release
	for _, rel := range rels {
		r, ok := rel.(*releasev1.Release)
		if ok && r.Chart != nil && r.Chart.Metadata != nil && r.Chart.Metadata.Name == chart {
			out = append(out, r)
		}
	}
	return out, nil
}

// installOrUpgrade installs the embedded chart as release name in namespace, or upgrades it
// when upgrade is set. Helm does not wait: readiness is waited for, with progress, by the
// caller.
func (m *Manager) installOrUpgrade(ctx context.Context, chartName, name, namespace string, values map[string]any, upgrade bool) error {
	ch, err := charts.Load(chartName)
	if err != nil {
		return err
	}
	cfg, err := m.helmFor(namespace)
	if err != nil {
		return err
	}
	if upgrade {
		u := action.NewUpgrade(cfg)
		u.Namespace = namespace
		u.ServerSideApply = "true"
		// The release's objects are the release's: a field set since by another manager (a
		// `helm upgrade` by hand, an older CLI, a kubectl edit) is taken back, as Helm's
		// three-way merge took it back before server-side apply, instead of failing.
		u.ForceConflicts = true
		u.WaitStrategy = kube.HookOnlyStrategy
		u.Timeout = m.opts.Timeout
		u.MaxHistory = 10
		// values are the whole of what the release gets (the caller merged the release's own
		// where it keeps them): without ResetValues, Helm would reuse the release's values
		// whenever values is empty.
		u.ResetValues = true
		if _, err := u.RunWithContext(ctx, name, ch, values); err != nil {
			return fmt.Errorf("upgrading Helm release %s/%s: %w", namespace, name, err)
		}
		return nil
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = name
	in.Namespace = namespace
	in.ServerSideApply = true
	// What an install finds in place is only what it was told to take: CRDs installed outside
	// Helm (NVIDIA's chart creates them as manager "helm", whose fields the new schema changes)
	// and the objects of an install that failed halfway. Both become the release's.
	in.ForceConflicts = true
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Timeout = m.opts.Timeout
	if _, err := in.RunWithContext(ctx, ch, values); err != nil {
		return fmt.Errorf("installing Helm release %s/%s: %w", namespace, name, err)
	}
	return nil
}

// uninstall removes a release and waits until its objects are gone.
func (m *Manager) uninstall(name, namespace string) error {
	cfg, err := m.helmFor(namespace)
	if err != nil {
		return err
	}
	u := action.NewUninstall(cfg)
	u.WaitStrategy = kube.StatusWatcherStrategy
	u.Timeout = m.opts.Timeout
	u.DeletionPropagation = "background"
	if _, err := u.Run(name); err != nil {
		return fmt.Errorf("uninstalling Helm release %s/%s: %w", namespace, name, err)
	}
	return nil
}

// progress prints a line to the manager's output.
func (m *Manager) progress(format string, args ...any) {
	fmt.Fprintf(m.out, format+"\n", args...)
}
