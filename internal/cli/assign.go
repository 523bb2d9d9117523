package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// assignFlags are the flags of assign and unassign.
type assignFlags struct {
	id       string
	kube     *kubeFlags
	selector string
	force    bool
	check    bool
	timeout  time.Duration
	quota    lifecycle.Quota
}

func newAssignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "assign",
		Short: "Assign a namespace or node to a control plane (cluster administrators)",
		Long: `Sets the label ` + cdv1beta1.ControlPlaneLabel + `=<id> on a namespace or node and, for a
namespace, creates the plane's RoleBindings and its ResourceQuota (--max-domains,
--max-channels) in it. Refused, with the reason and with nothing
changed, when the target carries another plane's label, when it holds (a namespace) or serves (a
node) live ComputeDomains of another plane, the legacy plane included, or when a same-named
RoleBinding exists that is not the plane's. Assigning what the plane already owns changes
nothing. Only cluster administrators may change the label (see docs/control-planes.md).`,
	}
	cmd.AddCommand(newAssignKindCommand(lifecycle.KindNamespace, false), newAssignKindCommand(lifecycle.KindNode, false))
	return cmd
}

func newUnassignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unassign",
		Short: "Remove a namespace or node from a control plane (cluster administrators)",
		Long: `Removes the label ` + cdv1beta1.ControlPlaneLabel + ` from a namespace or node that the plane owns
and, for a namespace, the plane's mirrored Secrets and RoleBindings in it; the target then belongs
to the legacy plane.
Refused when another plane owns the target, and while it still holds (namespace) or serves (node)
live ComputeDomains of the plane, unless --force. A namespace is refused, --force or not, while it
holds ResourceClaims that compute-domain.nvidia.com allocated and pods use: the plane keeps its
RoleBindings there until those pods are gone.`,
	}
	cmd.AddCommand(newAssignKindCommand(lifecycle.KindNamespace, true), newAssignKindCommand(lifecycle.KindNode, true))
	return cmd
}

func newAssignKindCommand(kind lifecycle.TargetKind, unassign bool) *cobra.Command {
	var f assignFlags
	verb := "assign"
	if unassign {
		verb = "unassign"
	}
	cmd := &cobra.Command{
		Use:     use(kind),
		Short:   strings.ToUpper(verb[:1]) + verb[1:] + " a " + string(kind) + map[lifecycle.TargetKind]string{lifecycle.KindNode: " or several"}[kind],
		Example: example(kind, verb),
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.check && (len(args) != 0 || f.selector != ""):
				return fmt.Errorf("--check takes no %s name or selector, got %d arguments: it checks every recorded node", kind, len(args))
			case f.check:
				return nil
			case kind == lifecycle.KindNode && f.selector != "" && len(args) > 0:
				return fmt.Errorf("name nodes or select them with -l, not both (usage: %s)", cmd.UseLine())
			case kind == lifecycle.KindNode && f.selector == "" && len(args) == 0:
				return fmt.Errorf("want at least one node name, or -l SELECTOR (usage: %s)", cmd.UseLine())
			case kind != lifecycle.KindNode && len(args) != 1:
				return fmt.Errorf("want exactly one %s name, got %d arguments (usage: %s)", kind, len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.check {
				return checkNodes(cmd, f)
			}
			return f.run(cmd, kind, verb, args)
		},
	}
	fs := cmd.Flags()
	plane.AddFlag(fs, &f.id)
	f.kube = newKubeFlags(false)
	f.kube.add(cmd)
	if kind == lifecycle.KindNode {
		fs.StringVarP(&f.selector, "selector", "l", "", "The nodes to "+verb+", by label selector (kubectl's syntax), instead of names")
	}
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "How long the command may take, retrying API requests that fail transiently")
	if kind == lifecycle.KindNode && !unassign {
		fs.BoolVar(&f.check, "check", false, "Check every recorded node assignment (of the plane given, or of every plane) instead of assigning: report nodes that lost their label (deleted and registered again) with the command that restores it; exit 1 if any did")
		cmd.Long = `Sets the plane label on the node and records the assignment in ConfigMap
` + lifecycle.NodeAssignmentsNamespace + "/" + lifecycle.NodeAssignmentsName + `, where only administrators write. A deleted node that
registers again comes back without the label (a kubelet cannot set it): ` + "`" + `cdplane assign node --check` + "`" + `
(no NAME) reports such nodes with the command that restores each.`
	}
	if kind == lifecycle.KindNamespace && !unassign {
		fs.Int64Var(&f.quota.Domains, "max-domains", lifecycle.DefaultQuotaDomains,
			"ComputeDomains the namespace may hold (the plane's ResourceQuota "+lifecycle.QuotaName("<id>")+"); 0: unbounded")
		fs.Int64Var(&f.quota.Channels, "max-channels", lifecycle.DefaultQuotaChannels,
			"Channel devices its claims may request at once, one per pod and node of its jobs (same ResourceQuota); 0: unbounded")
	}
	if unassign {
		fs.BoolVar(&f.force, "force", false, "Unassign even though live ComputeDomains of the plane remain (the plane stops reconciling them); never while pods use claims of cdplane's driver there")
	}
	return cmd
}

// run assigns (or unassigns, by verb) the targets of kind named in args or selected by
// f.selector.
func (f *assignFlags) run(cmd *cobra.Command, kind lifecycle.TargetKind, verb string, args []string) error {
	// The id, the names and the selector are checked before the kubeconfig is read.
	errs := []error{f.validate()}
	var sel labels.Selector
	if f.selector != "" {
		var err error
		if sel, err = labels.Parse(f.selector); err != nil {
			errs = append(errs, fmt.Errorf("-l %q: %w", f.selector, err))
		}
	}
	for _, name := range args {
		errs = append(errs, lifecycle.ValidateAssignment(f.id, lifecycle.Target{Kind: kind, Name: name}))
	}
	if err := errors.Join(errs...); err != nil {
		return usage(refused(verb, err))
	}
	c, err := assignClient(cmd, *f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	names := args
	if sel != nil {
		if names, err = selectedNodes(ctx, c, sel); err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("-l %q selects no node", f.selector)
		}
	}
	// Each node on its own: one refused (another plane's, live domains) leaves the
	// others done, and the exit status says something was refused.
	var failed []error
	for _, name := range names {
		t := lifecycle.Target{Kind: kind, Name: name}
		var res *lifecycle.Result
		if verb == "unassign" {
			res, err = lifecycle.Unassign(ctx, c, f.id, t, f.force)
		} else {
			res, err = lifecycle.AssignWithQuota(ctx, c, f.id, t, f.quota)
		}
		printResult(cmd, verb, t, f.id, res, err)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", t, refused(verb, err)))
		}
	}
	if len(names) == 1 && len(failed) == 1 {
		return errors.Unwrap(failed[0]) // already says "refused", once
	}
	if len(failed) > 0 {
		err := fmt.Errorf("%d of %d %ss not %sed: %w", len(failed), len(names), kind, verb, errors.Join(failed...))
		if !allRefused(failed) {
			// Something else went wrong too: the exit code says failed, not refused.
			err = fmt.Errorf("%d of %d %ss not %sed: %s", len(failed), len(names), kind, verb, errors.Join(failed...).Error())
		}
		return err
	}
	return nil
}

// use is the usage line of assign/unassign KIND.
func use(kind lifecycle.TargetKind) string {
	if kind == lifecycle.KindNode {
		return "node (NAME... | -l SELECTOR) --" + plane.FlagName + " ID"
	}
	return string(kind) + " NAME --" + plane.FlagName + " ID"
}

// example is the Example section of assign/unassign KIND.
func example(kind lifecycle.TargetKind, verb string) string {
	if kind == lifecycle.KindNode {
		return "  cdplane " + verb + " node gpu-node-1 gpu-node-2 --" + plane.FlagName + " plane-a\n" +
			"  cdplane " + verb + " node -l example.com/rack=r01 --" + plane.FlagName + " plane-a"
	}
	return "  cdplane " + verb + " namespace team-a --" + plane.FlagName + " plane-a"
}

// selectedNodes lists the names of the nodes sel selects (their metadata only).
func selectedNodes(ctx context.Context, c client.Client, sel labels.Selector) ([]string, error) {
	nodes := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, nodes, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing the nodes -l selects: %w", err)
	}
	names := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	return names, nil
}

// allRefused reports whether every error is a refusal.
func allRefused(errs []error) bool {
	for _, err := range errs {
		if !lifecycle.IsRefused(err) {
			return false
		}
	}
	return true
}

// refused says that an ownership rule refused the command (nothing changed); other errors pass
// unchanged.
func refused(verb string, err error) error {
	if lifecycle.IsRefused(err) {
		return fmt.Errorf("%s refused: %w", verb, err)
	}
	return err
}

// printResult prints what an assign or unassign changed and, unless it failed (then the error
// says what is left), its outcome.
func printResult(cmd *cobra.Command, verb string, t lifecycle.Target, id string, res *lifecycle.Result, err error) {
	if res == nil {
		return
	}
	w := cmd.OutOrStdout()
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
	}
	for _, warning := range res.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", warning)
	}
	if err != nil {
		return
	}
	to := "to"
	if verb == "unassign" {
		to = "from"
	}
	if len(res.Changes) == 0 {
		fmt.Fprintf(w, "%s already %sed %s control plane %q: nothing changed\n", t, verb, to, id)
		return
	}
	fmt.Fprintf(w, "%s %sed %s control plane %q\n", t, verb, to, id)
}

func (f *assignFlags) validate() error {
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	return nil
}

// assignClient builds a client from the kubeconfig flags whose requests are retried while they
// fail transiently, within --timeout, saying so on the command's output.
func assignClient(cmd *cobra.Command, f assignFlags) (client.Client, error) {
	return f.kube.client(cmd.OutOrStdout(), f.timeout)
}

// checkNodes reports the recorded node assignments that do not hold (lifecycle.CheckNodeAssignments):
// an error when a node exists without its plane's label or with another's, or a labelled node
// is not recorded; a recorded node that does not exist is only reported.
func checkNodes(cmd *cobra.Command, f assignFlags) error {
	if err := f.validate(); err != nil {
		return usage(err)
	}
	if f.id != "" {
		if err := plane.ValidateID(f.id); err != nil {
			return usage(err)
		}
	}
	c, err := assignClient(cmd, f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	findings, holding, err := lifecycle.NodeAssignmentReport(ctx, c, f.id)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	broken := 0
	for _, fd := range findings {
		fmt.Fprintln(w, fd.Message)
		if !fd.Absent {
			broken++
		}
	}
	whose := "their control plane's"
	if f.id != "" {
		whose = fmt.Sprintf("control plane %q's", f.id)
	}
	fmt.Fprintf(w, "%d assigned node(s) carry %s label\n", holding, whose)
	if broken > 0 {
		return fmt.Errorf("%d node assignment(s) do not hold; the commands above repair them", broken)
	}
	return nil
}
