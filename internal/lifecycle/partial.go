package lifecycle

import (
	"fmt"
	"strings"
)

// PartialError is a command that failed after it had changed something: it names what is done,
// what is not, and the command that finishes the job (the same command again, as every
// lifecycle command is idempotent, unless Finish says otherwise).
type PartialError struct {
	// Err is the failure.
	Err error
	// Done lists what this run changed before it failed.
	Done []string
	// NotDone says what is left.
	NotDone string
	// Finish is the command that finishes it.
	Finish string
}

func (e *PartialError) Error() string {
	done := "nothing yet"
	if len(e.Done) > 0 {
		done = strings.Join(e.Done, "; ")
	}
	return fmt.Sprintf("%v\n  done: %s\n  not done: %s\n  to finish, run: %s", e.Err, done, e.NotDone, e.Finish)
}

func (e *PartialError) Unwrap() error { return e.Err }

// commandLine renders a cdplane command naming plane id (the legacy plane as --control-plane-id=).
func commandLine(words string, id string) string {
	if id == "" {
		return "cdplane " + words + " --control-plane-id="
	}
	return "cdplane " + words + " --control-plane-id " + id
}
