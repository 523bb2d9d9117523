package status

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateRequest checks the arguments of `cdplane status [NAME] [-n NAMESPACE | -A]` before
// anything is read: at most one ComputeDomain name, a valid Kubernetes name, in a valid
// namespace name; -A (every namespace) neither with -n nor with a name, which is looked up in one
// namespace. A NAME without -n is looked up in the kubeconfig context's namespace, as kubectl
// does, so the namespace is checked only when given.
func ValidateRequest(namespace string, allNamespaces bool, args []string) error {
	var errs []error
	switch {
	case len(args) > 1:
		errs = append(errs, fmt.Errorf("want at most one ComputeDomain name, got %d arguments", len(args)))
	case allNamespaces && len(args) == 1:
		errs = append(errs, fmt.Errorf("ComputeDomain %q: -A lists every namespace's domains; name one with -n NAMESPACE instead", args[0]))
	case len(args) == 1:
		if e := validation.IsDNS1123Subdomain(args[0]); len(e) > 0 {
			errs = append(errs, fmt.Errorf("invalid ComputeDomain name %q: %s", args[0], strings.Join(e, "; ")))
		}
	}
	if allNamespaces && namespace != "" {
		errs = append(errs, fmt.Errorf("-n %s and -A: give one namespace or every namespace, not both", namespace))
	}
	if namespace != "" {
		if e := validation.IsDNS1123Label(namespace); len(e) > 0 {
			errs = append(errs, fmt.Errorf("invalid namespace name %q: %s", namespace, strings.Join(e, "; ")))
		}
	}
	return errors.Join(errs...)
}
