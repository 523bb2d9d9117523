package bench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// controllerChildArg, as the test binary's first argument, makes it the controller process of
// a benchmark run by a test (what `cdplane bench controller` is for the command).
const controllerChildArg = "bench-controller-child"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == controllerChildArg {
		ctrllog.SetLogger(logr.Discard())
		var a ControllerArgs
		fs := pflag.NewFlagSet(controllerChildArg, pflag.ContinueOnError)
		a.AddFlags(fs)
		err := fs.Parse(os.Args[2:])
		if err == nil {
			err = ServeController(context.Background(), a, os.Stdin, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
