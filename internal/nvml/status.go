package nvml

import "fmt"

// FabricStatus is the NVML return code (nvmlReturn_t) of a GPU's fabric
// registration. It is kept apart from go-nvml's Return so that this package's
// non-cgo parts (the simulation, the derivation) build without cgo.
type FabricStatus uint32

// FabricStatusSuccess is NVML_SUCCESS: registration went well.
const FabricStatusSuccess FabricStatus = 0

// fabricStatusNames are nvml.h's return codes, without the NVML_ prefix.
var fabricStatusNames = map[FabricStatus]string{
	0:   "SUCCESS",
	1:   "ERROR_UNINITIALIZED",
	2:   "ERROR_INVALID_ARGUMENT",
	3:   "ERROR_NOT_SUPPORTED",
	4:   "ERROR_NO_PERMISSION",
	5:   "ERROR_ALREADY_INITIALIZED",
	6:   "ERROR_NOT_FOUND",
	7:   "ERROR_INSUFFICIENT_SIZE",
	8:   "ERROR_INSUFFICIENT_POWER",
	9:   "ERROR_DRIVER_NOT_LOADED",
	10:  "ERROR_TIMEOUT",
	11:  "ERROR_IRQ_ISSUE",
	12:  "ERROR_LIBRARY_NOT_FOUND",
	13:  "ERROR_FUNCTION_NOT_FOUND",
	14:  "ERROR_CORRUPTED_INFOROM",
	15:  "ERROR_GPU_IS_LOST",
	16:  "ERROR_RESET_REQUIRED",
	17:  "ERROR_OPERATING_SYSTEM",
	18:  "ERROR_LIB_RM_VERSION_MISMATCH",
	19:  "ERROR_IN_USE",
	20:  "ERROR_MEMORY",
	21:  "ERROR_NO_DATA",
	22:  "ERROR_VGPU_ECC_NOT_SUPPORTED",
	23:  "ERROR_INSUFFICIENT_RESOURCES",
	24:  "ERROR_FREQ_NOT_SUPPORTED",
	25:  "ERROR_ARGUMENT_VERSION_MISMATCH",
	26:  "ERROR_DEPRECATED",
	27:  "ERROR_NOT_READY",
	28:  "ERROR_GPU_NOT_FOUND",
	29:  "ERROR_INVALID_STATE",
	30:  "ERROR_RESET_TYPE_NOT_SUPPORTED",
	999: "ERROR_UNKNOWN",
}

// String returns nvml.h's name of the code, or the number when it has none.
func (s FabricStatus) String() string {
	if name, ok := fabricStatusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("NVML_RETURN(%d)", uint32(s))
}
