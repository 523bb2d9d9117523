package status

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Domains is the output of `cdplane status -n NS` and `cdplane status -A`: one summary per
// ComputeDomain. The JSON field names are as stable as Planes' and Domain's.
type Domains struct {
	ObservedAt time.Time `json:"observedAt"`
	// Namespace is the namespace listed; "" when every namespace was (-A).
	Namespace string `json:"namespace"`
	// Domains are sorted by namespace, then name.
	Domains []DomainSummary `json:"domains"`
}

// DomainSummary is one ComputeDomain's row: what its status says, without the reads that
// explain it (cdplane status NAME does those).
type DomainSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// ControlPlaneID is the domain's plane ("" for the legacy plane).
	ControlPlaneID string `json:"controlPlaneID"`
	// Status is status.status: Ready, NotReady, or "" before the controller reported.
	Status     string `json:"status"`
	NumNodes   int    `json:"numNodes"`
	ReadyNodes int32  `json:"readyNodes"`
	// Cliques counts the cliques its members form, as cdplane status NAME groups them (the
	// members without an NVLink fabric count as one).
	Cliques           int       `json:"cliques"`
	CreationTimestamp time.Time `json:"creationTimestamp"`
	// AgeSeconds is ObservedAt minus CreationTimestamp, in whole seconds.
	AgeSeconds int64 `json:"ageSeconds"`
}

// GatherDomains reads the ComputeDomains of namespace (every namespace when "") and the
// cliques of every plane, and summarises each domain. Cliques that cannot be read (the
// ComputeDomainCliques gate off, or no right to read them cluster-wide) leave the count to
// status.nodes.
func GatherDomains(ctx context.Context, c client.Reader, namespace string, now time.Time) (Domains, error) {
	cds := &cdv1beta1.ComputeDomainList{}
	if err := c.List(ctx, cds, client.InNamespace(namespace)); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return BuildDomains(namespace, nil, nil, now), nil
		}
		return Domains{}, fmt.Errorf("listing ComputeDomains: %w", err)
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	switch err := c.List(ctx, cliques, client.HasLabels{cdv1beta1.ComputeDomainLabel}); {
	case err == nil:
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		cliques.Items = nil
	default:
		return Domains{}, fmt.Errorf("listing ComputeDomainCliques: %w", err)
	}
	return BuildDomains(namespace, cds.Items, cliques.Items, now), nil
}

// BuildDomains summarises domains; cliques are any planes' cliques, matched to their domain by
// its uid label.
func BuildDomains(namespace string, domains []cdv1beta1.ComputeDomain, cliques []cdv1beta1.ComputeDomainClique, now time.Time) Domains {
	byUID := map[string][]cdv1beta1.ComputeDomainClique{}
	for _, c := range cliques {
		uid := c.Labels[cdv1beta1.ComputeDomainLabel]
		byUID[uid] = append(byUID[uid], c)
	}
	out := Domains{ObservedAt: now.UTC(), Namespace: namespace, Domains: make([]DomainSummary, 0, len(domains))}
	for i := range domains {
		cd := &domains[i]
		created := cd.CreationTimestamp.UTC()
		out.Domains = append(out.Domains, DomainSummary{
			Namespace: cd.Namespace, Name: cd.Name, UID: string(cd.UID),
			ControlPlaneID: cd.Labels[cdv1beta1.ControlPlaneLabel], Status: cd.Status.Status,
			NumNodes: cd.Spec.NumNodes, ReadyNodes: cd.Status.ReadyNodes,
			Cliques:           len(groupCliques(Entries(cd, byUID[string(cd.UID)]))),
			CreationTimestamp: created, AgeSeconds: int64(now.Sub(created) / time.Second),
		})
	}
	slices.SortFunc(out.Domains, func(a, b DomainSummary) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// WriteDomainsText writes one row per domain: NAME, STATUS, NODES (ready/desired), CLIQUES
// and AGE, with a NAMESPACE column first when every namespace was listed.
func WriteDomainsText(w io.Writer, d Domains, opts Options) error {
	if len(d.Domains) == 0 {
		where := "in namespace " + printable(d.Namespace)
		if d.Namespace == "" {
			where = "in any namespace"
		}
		_, err := fmt.Fprintf(w, "No ComputeDomain found %s.\n", where)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	all := d.Namespace == ""
	if all {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tSTATUS\tNODES\tCLIQUES\tAGE")
	for _, s := range d.Domains {
		if all {
			fmt.Fprintf(tw, "%s\t", printable(s.Namespace))
		}
		age := duration.HumanDuration(time.Duration(s.AgeSeconds) * time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\n", printable(s.Name), paint(orDash(printable(s.Status)), s.Status, opts),
			s.ReadyNodes, s.NumNodes, s.Cliques, age)
	}
	return tw.Flush()
}
