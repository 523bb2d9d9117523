package imex

import (
	"errors"
	"fmt"
	"testing"
)

func TestDriverSupportsHostnames(t *testing.T) {
	cases := map[string]struct {
		want    bool
		wantErr bool
	}{
		"570.158.01": {want: true},
		"570.158.1":  {want: true},
		"570.158.02": {want: true},
		"570.172.08": {want: true},
		"580.82.07":  {want: true},
		"570.158":    {want: false},
		"570.148.08": {want: false},
		"565.57.01":  {want: false},
		"":           {wantErr: true},
		"580.x":      {wantErr: true},
		"-1.2":       {wantErr: true},
	}
	for v, tc := range cases {
		got, err := DriverSupportsHostnames(v)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("DriverSupportsHostnames(%q) = %v, %v; want %v, error %v", v, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestIsSessionInUse(t *testing.T) {
	exit := &ExitError{Binary: "nvidia-imex", Code: 1, Stderr: "IMEX init failed: NV_ERR_IN_USE"}
	for err, want := range map[error]bool{
		nil:                              false,
		exit:                             true,
		fmt.Errorf("starting: %w", exit): true,
		errors.New("exit status 1"):      false,
	} {
		if got := IsSessionInUse(err); got != want {
			t.Errorf("IsSessionInUse(%v) = %v, want %v", err, got, want)
		}
	}
}

func TestIsDottedVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"570.133.20": true, "535.261.03": true, "580.82": true,
		"": false, "570": false, "570..20": false, ".570.1": false, "570.1.": false, "+570.1": false, "570.1-rc": false, "570.1 ": false, " 570.1": false,
	} {
		if got := IsDottedVersion(v); got != want {
			t.Errorf("IsDottedVersion(%q) = %v, want %v", v, got, want)
		}
	}
}
