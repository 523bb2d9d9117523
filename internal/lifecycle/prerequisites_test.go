package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// lister answers List with a fixed error or list of domains.
type lister struct {
	client.Reader
	err     error
	domains []cdv1beta1.ComputeDomain
}

func (l lister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if l.err != nil {
		return l.err
	}
	list.(*cdv1beta1.ComputeDomainList).Items = l.domains
	return nil
}

// Removing the CRDs deletes every domain: only a list that proves there are none lets it pass.
func TestNoDomainsLeft(t *testing.T) {
	gr := schema.GroupResource{Group: cdv1beta1.GroupName, Resource: "computedomains"}
	for name, tc := range map[string]struct {
		l       lister
		wantErr string
	}{
		"none":             {l: lister{}},
		"kind not served":  {l: lister{err: &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: cdv1beta1.GroupName, Kind: "ComputeDomain"}}}},
		"some left":        {l: lister{domains: []cdv1beta1.ComputeDomain{*testutil.MakeComputeDomain("cd").Namespace("team").Obj()}}, wantErr: "ComputeDomains still exist (e.g. team/cd)"},
		"forbidden":        {l: lister{err: apierrors.NewForbidden(gr, "", errors.New("no"))}, wantErr: "cannot tell whether ComputeDomains still exist"},
		"apiserver error":  {l: lister{err: apierrors.NewInternalError(errors.New("etcd"))}, wantErr: "refusing to remove the CRDs"},
		"connection error": {l: lister{err: errors.New("connection refused")}, wantErr: "cannot tell"},
	} {
		t.Run(name, func(t *testing.T) {
			err := noDomainsLeft(context.Background(), tc.l)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
