package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// documentAPIVersion is the apiVersion of the documents the CLI prints (-o json|yaml|jsonpath):
// they are reports, not API objects, in a group of their own.
const documentAPIVersion = "status.cdplane.io/v1"

// The kinds of the printed documents.
const (
	kindPlaneStatusList  = "PlaneStatusList"
	kindDomainStatus     = "DomainStatus"
	kindDomainStatusList = "DomainStatusList"
	kindVersion          = "Version"
	kindBenchReport      = "BenchReport"
	kindBenchMemory      = "BenchMemoryReport"
	kindBenchSlices      = "BenchSlicesReport"
)

// outputText is the default format: the command's own text.
const outputText = "text"

// outputFlags is -o: the command's text, or a document through cli-runtime's printers, as
// kubectl prints objects.
type outputFlags struct {
	format string
	// names allows -o name (documents that name objects: planes, domains).
	names bool
}

// add registers -o on cmd, text by default.
func (o *outputFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", outputText, "Output format: "+strings.Join(o.formats(), ", "))
}

func (o *outputFlags) formats() []string {
	f := []string{outputText, "json", "yaml"}
	if o.names {
		f = append(f, "name")
	}
	return append(f, "jsonpath=TEMPLATE", "jsonpath-file=FILE")
}

// text reports whether the command prints its text.
func (o *outputFlags) text() bool { return o.format == outputText || o.format == "" }

// printer returns the printer of -o, nil for text. It reads a jsonpath-file and parses a
// template, so a command calls it with its other checks, before it reaches a cluster.
func (o *outputFlags) printer() (printers.ResourcePrinter, error) {
	if o.text() {
		return nil, nil
	}
	format, arg, hasArg := strings.Cut(o.format, "=")
	var (
		p   printers.ResourcePrinter
		err error
	)
	switch {
	case (format == "json" || format == "yaml") && !hasArg:
		p, err = (&genericclioptions.JSONYamlPrintFlags{}).ToPrinter(format)
	case format == "name" && o.names && !hasArg:
		p, err = (&genericclioptions.NamePrintFlags{}).ToPrinter(format)
	case (format == "jsonpath" || format == "jsonpath-file") && hasArg && arg != "":
		// Missing keys print nothing, as kubectl's -o jsonpath does by default: a template
		// can name a field that only some documents have.
		p, err = genericclioptions.NewJSONPathPrintFlags(arg, true).ToPrinter(format)
	default:
		return nil, fmt.Errorf("--output %q: want one of %s", o.format, strings.Join(o.formats(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("--output %q: %w", o.format, err)
	}
	return p, nil
}

// document is a report printed through cli-runtime's printers, which print only
// runtime.Objects that state their apiVersion and kind: body's JSON fields with apiVersion
// and kind first. Every field of body keeps its name, so a script that read the JSON before
// these were added reads it still.
type document struct {
	metav1.TypeMeta
	body any
}

func newDocument(kind string, body any) *document {
	return &document{TypeMeta: metav1.TypeMeta{APIVersion: documentAPIVersion, Kind: kind}, body: body}
}

// MarshalJSON writes apiVersion and kind, then body's fields.
func (d *document) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}{d.APIVersion, d.Kind})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(d.body)
	if err != nil {
		return nil, err
	}
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("a %s document must be a JSON object, got %.20s", d.Kind, body)
	}
	if string(body) == "{}" {
		return head, nil
	}
	return append(append(head[:len(head)-1], ','), body[1:]...), nil
}

// DeepCopyObject copies the document as JSON: what the printers see of it.
func (d *document) DeepCopyObject() runtime.Object {
	b, err := json.Marshal(d.body)
	if err != nil {
		return &document{TypeMeta: d.TypeMeta, body: d.body}
	}
	return &document{TypeMeta: d.TypeMeta, body: json.RawMessage(b)}
}

// printDocument prints doc with p; with -o name it prints names instead: one line per object the
// document is about.
func printDocument(w io.Writer, p printers.ResourcePrinter, doc *document, names []runtime.Object) error {
	if _, ok := p.(*printers.NamePrinter); ok {
		for _, n := range names {
			if err := p.PrintObj(n, w); err != nil {
				return err
			}
		}
		return nil
	}
	return p.PrintObj(doc, w)
}
