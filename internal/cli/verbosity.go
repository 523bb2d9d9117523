package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// verbosityFlag is kubectl's -v: klog's verbosity, which client-go's and Helm's logs follow.
const verbosityFlag = "v"

// addVerbosity adds -v to root and every command below it.
func addVerbosity(root *cobra.Command) {
	root.PersistentFlags().Int32P(verbosityFlag, verbosityFlag, 0,
		"Log verbosity on stderr, as kubectl's: 1 adds Helm's log to install, apply and destroy; 6 logs every API request, 7 their headers, 8 their bodies")
}

// verbosity is -v as given to cmd (0 when cmd is not under the root).
func verbosity(cmd *cobra.Command) int32 {
	v, err := cmd.Flags().GetInt32(verbosityFlag)
	if err != nil {
		return 0
	}
	return v
}

// setVerbosity sets klog's verbosity before the command builds a client: client-go decides
// when it builds a transport whether to log the requests through it.
func setVerbosity(v int32) error {
	if v < 0 {
		return fmt.Errorf("-v %d: want 0 or more", v)
	}
	var level klog.Level
	return level.Set(strconv.Itoa(int(v)))
}
