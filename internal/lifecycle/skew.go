package lifecycle

import (
	"fmt"

	"github.com/Masterminds/semver/v3"

	"cdplane/internal/refusal"
	"cdplane/internal/version"
)

// checkPlaneSkew refuses to install or upgrade a plane to this CLI's version while the
// prerequisites release is of an older version (docs/upgrading.md, "Version skew"): the CRDs
// and admission policies a plane's controller writes through are the prerequisites', and a
// newer controller may rely on what an older CRD lacks (0.2.0 writes status.nodes as an atomic
// list, and bounds the status for it). Prerequisites newer than a plane are fine: that is the
// state between the two steps of every upgrade, and where a plane goes back to the previous
// release. Without a prerequisites release (CRDs installed by hand or by NVIDIA's chart) there
// is no version to compare, and nothing is refused.
func (m *Manager) checkPlaneSkew() error {
	rel, err := m.release(PrerequisitesRelease, PrerequisitesNamespace)
	if err != nil || rel == nil || rel.Chart == nil || rel.Chart.Metadata == nil {
		return err
	}
	return planeSkew(rel.Chart.Metadata.Version, version.Version)
}

// planeSkew is checkPlaneSkew's decision for the prerequisites' chart version and the plane's.
func planeSkew(prerequisites, plane string) error {
	pv, err := semver.NewVersion(prerequisites)
	if err != nil {
		return fmt.Errorf("the prerequisites release's chart version %q is not a version: %w", prerequisites, err)
	}
	v, err := semver.NewVersion(plane)
	if err != nil {
		return fmt.Errorf("this CLI's version %q is not a version: %w", plane, err)
	}
	// Compared without pre-release parts: 0.2.0-dev prerequisites serve a 0.2.0 plane, and a
	// 0.2.0-dev plane needs 0.2.0-dev or later.
	if pv.Major() < v.Major() || (pv.Major() == v.Major() && pv.Minor() < v.Minor()) {
		return refusal.Errorf("the prerequisites are at %s, older than this plane (%s): a plane's controller writes through the prerequisites' CRDs and admission policies, so upgrade them first with this CLI: cdplane apply prerequisites (docs/upgrading.md)", prerequisites, plane)
	}
	return nil
}
