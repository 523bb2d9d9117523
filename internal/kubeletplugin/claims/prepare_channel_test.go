package claims

import (
	"testing"

	"cdplane/internal/kubeletplugin/failure"
)

func TestCheckDomainNamespace(t *testing.T) {
	if err := checkDomainNamespace("ns", "c", "ns", "cd"); err != nil {
		t.Errorf("same namespace: %v", err)
	}
	if err := checkDomainNamespace("ns", "c", "other", "cd"); !failure.IsPermanent(err) {
		t.Errorf("other namespace: %v, want a permanent error", err)
	}
}
