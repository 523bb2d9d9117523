package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/status"
)

// legacyPlaneName is the legacy plane's name in -o name (plane/(legacy)), as the text table
// names it: its id is empty, and "plane/" alone would read as a line cut short. No id can
// collide with it (ids are DNS labels).
const legacyPlaneName = status.LegacyName

// statusFlags are the flags of status.
type statusFlags struct {
	kube          *kubeFlags
	allNamespaces bool
	output        outputFlags
	watch         bool
	timeout       time.Duration
}

// statusRequest is what status was asked to show, resolved from the flags and arguments.
type statusRequest struct {
	// domain is the ComputeDomain named, in namespace; "" for a list.
	domain string
	// namespace whose domains are listed, or the domain's; "" with listDomains: every namespace.
	namespace   string
	listDomains bool
}

func newStatusCommand() *cobra.Command {
	f := statusFlags{kube: newKubeFlags(true), output: outputFlags{names: true}}
	cmd := &cobra.Command{
		Use:   "status [NAME] [-n NAMESPACE | -A]",
		Short: "Show the control planes, a namespace's ComputeDomains, or one ComputeDomain drawn as its cliques",
		Long: `Without arguments: one row per control plane (installed, or named by a plane label on a node,
namespace or ComputeDomain): PLANE (its id, "(legacy)" for the legacy plane), VERSION (the
controller image's tag), CONTROLLER (ready/desired replicas), NODES (nodes labelled with the
plane's id; for the legacy plane, nodes running its kubelet plugin), PLUGIN-READY (of those, nodes
whose kubelet-plugin pod is Ready), NAMESPACES (namespaces labelled with the plane's id, its driver
namespace not counted; for the legacy plane, unlabelled namespaces holding its domains),
DOMAINS-READY and DOMAINS-NOT-READY (by status.status; not reconciled yet counts as not ready),
LEADER (the holder of the controller's leader-election Lease) and LEADER-AGE (since it acquired
the Lease).

With -n NAMESPACE: one row per ComputeDomain of the namespace: NAME, STATUS, NODES (ready/desired),
CLIQUES and AGE; with -A, every namespace's, with a NAMESPACE column.

With NAME: the ComputeDomain's status and conditions, one row per clique with one cell per node,
name[index] and ✓ Ready, ✗ NotReady (coloured on a terminal unless $NO_COLOR is set), and every
node that holds the domain back, with why: no daemon pod, IMEX blocked (a host nvidia-imex, a
failed NVLink fabric), clique full, daemon not Ready with its last Warning event (the readiness
probe's message), not joined yet. NAME is looked up in -n NAMESPACE, or else in the kubeconfig
context's namespace, as kubectl does.

-o json or yaml prints the same as a document with stable field names (docs/operations.md),
-o jsonpath=TEMPLATE picks fields of it, -o name prints plane/<id> (plane/(legacy) for the legacy
plane) or computedomain.resource.nvidia.com/<name>. --watch draws again every 2 s until
interrupted.`,
		Example: `  cdplane status
  cdplane status -n team-a
  cdplane status -n team-a train -o jsonpath='{.cliques[*].id}'`,
		Args: cobra.ArbitraryArgs, // checked in RunE, with the flags, before the kubeconfig is read
		RunE: func(cmd *cobra.Command, args []string) error {
			p, req, err := f.validate(args)
			if err != nil {
				return usage(err)
			}
			c, err := f.kube.client(cmd.ErrOrStderr(), f.timeout)
			if err != nil {
				return err
			}
			if req.domain != "" && req.namespace == "" {
				if req.namespace, err = f.kube.namespace(); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			opts := status.Options{Color: p == nil && status.ColorFor(out)}
			draw := func(ctx context.Context, w io.Writer) error {
				ctx, cancel := context.WithTimeout(ctx, f.timeout)
				defer cancel()
				return drawStatus(ctx, w, c, req, p, opts)
			}
			if !f.watch {
				return draw(cmd.Context(), out)
			}
			sep := "\n"
			if p != nil {
				sep = ""
			}
			return status.Watch(cmd.Context(), out, status.WatchOptions{Clear: p == nil && status.IsTerminal(out), Separator: sep}, draw)
		},
	}
	fs := cmd.Flags()
	f.kube.add(cmd)
	fs.Lookup("namespace").Usage = "List the ComputeDomains of this namespace, or look NAME up in it (default for NAME: the kubeconfig context's namespace)"
	fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "List the ComputeDomains of every namespace")
	f.output.add(cmd)
	fs.BoolVarP(&f.watch, "watch", "w", false, "Draw again every 2 s until interrupted")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "How long one reading of the cluster may take, retrying API requests that fail transiently")
	return cmd
}

// validate checks the flags and arguments and says what to show; the namespace of a NAME
// without -n is the kubeconfig's, read later.
func (f *statusFlags) validate(args []string) (printers.ResourcePrinter, statusRequest, error) {
	ns := *f.kube.Namespace
	errs := []error{status.ValidateRequest(ns, f.allNamespaces, args)}
	if f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %s", f.timeout))
	}
	p, err := f.output.printer()
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, statusRequest{}, err
	}
	req := statusRequest{namespace: ns, listDomains: ns != "" || f.allNamespaces}
	if len(args) == 1 {
		req.domain, req.listDomains = args[0], false
	}
	return p, req, nil
}

// drawStatus reads the cluster once and prints what was asked for: as text when p is nil.
func drawStatus(ctx context.Context, w io.Writer, c client.Client, req statusRequest, p printers.ResourcePrinter, opts status.Options) error {
	now := time.Now()
	switch {
	case req.domain != "":
		d, err := status.GatherDomain(ctx, c, req.namespace, req.domain, now)
		if err != nil {
			return err
		}
		if p == nil {
			return status.WriteDomainText(w, d, opts)
		}
		return printDocument(w, p, newDocument(kindDomainStatus, d), []runtime.Object{domainName(d.Namespace, d.Name)})
	case req.listDomains:
		d, err := status.GatherDomains(ctx, c, req.namespace, now)
		if err != nil {
			return err
		}
		if p == nil {
			return status.WriteDomainsText(w, d, opts)
		}
		names := make([]runtime.Object, 0, len(d.Domains))
		for _, s := range d.Domains {
			names = append(names, domainName(s.Namespace, s.Name))
		}
		return printDocument(w, p, newDocument(kindDomainStatusList, d), names)
	default:
		pl, err := status.GatherPlanes(ctx, c, now)
		if err != nil {
			return err
		}
		if p == nil {
			return status.WritePlanesText(w, pl, opts)
		}
		names := make([]runtime.Object, 0, len(pl.Planes))
		for _, x := range pl.Planes {
			names = append(names, planeName(x))
		}
		return printDocument(w, p, newDocument(kindPlaneStatusList, pl), names)
	}
}

// domainName is a ComputeDomain as -o name prints it: computedomain.resource.nvidia.com/<name>.
func domainName(namespace, name string) runtime.Object {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomain"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
	}
}

// planeName is a plane as -o name prints it: plane/<id>, plane/(legacy) for the legacy plane.
// Planes are no API kind: the name has no group.
func planeName(p status.Plane) runtime.Object {
	name := p.ID
	if p.Legacy {
		name = legacyPlaneName
	}
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "Plane"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
}
