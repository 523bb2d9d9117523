package charts

import (
	"fmt"
	"time"

	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

// Package writes chart name as `helm package` does, <name>-<version>.tgz in dir, with every
// file time set to modTime, so that the same chart gives the same archive. It returns the path.
func Package(name, dir string, modTime time.Time) (string, error) {
	ch, err := Load(name)
	if err != nil {
		return "", err
	}
	ch.StampModTimes(modTime.UTC())
	p, err := chartutil.Save(ch, dir)
	if err != nil {
		return "", fmt.Errorf("packaging chart %s: %w", name, err)
	}
	return p, nil
}
