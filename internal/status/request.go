package status

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Output formats.
const (
	OutputText = "text"
	OutputJSON = "json"
)

// ValidateRequest checks the arguments of `cdplane status [-n NAMESPACE NAME] [-o FORMAT]`
// before anything is read: a domain is named by namespace and name together, both valid
// Kubernetes names, and the format is known.
func ValidateRequest(namespace string, args []string, output string) error {
	var errs []error
	if output != OutputText && output != OutputJSON {
		errs = append(errs, fmt.Errorf("--output %q: want %s or %s", output, OutputText, OutputJSON))
	}
	switch {
	case len(args) > 1:
		errs = append(errs, fmt.Errorf("want at most one ComputeDomain name, got %d arguments", len(args)))
	case len(args) == 1 && namespace == "":
		errs = append(errs, fmt.Errorf("ComputeDomain %q: give its namespace too (cdplane status -n NAMESPACE %s)", args[0], args[0]))
	case len(args) == 0 && namespace != "":
		errs = append(errs, fmt.Errorf("-n %s: give the ComputeDomain's name too (cdplane status -n %s NAME)", namespace, namespace))
	case len(args) == 1:
		if e := validation.IsDNS1123Label(namespace); len(e) > 0 {
			errs = append(errs, fmt.Errorf("invalid namespace name %q: %s", namespace, strings.Join(e, "; ")))
		}
		if e := validation.IsDNS1123Subdomain(args[0]); len(e) > 0 {
			errs = append(errs, fmt.Errorf("invalid ComputeDomain name %q: %s", args[0], strings.Join(e, "; ")))
		}
	}
	return errors.Join(errs...)
}
