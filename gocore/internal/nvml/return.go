package nvml

import "strconv"

// Return is an nvmlReturn_t status code. Every value but Success is an
// error; match them with errors.Is.
type Return int32

// NVML status codes, with nvml.h's values.
const (
	Success                    Return = 0
	ErrUninitialized           Return = 1
	ErrInvalidArgument         Return = 2
	ErrNotSupported            Return = 3
	ErrNoPermission            Return = 4
	ErrAlreadyInitialized      Return = 5
	ErrNotFound                Return = 6
	ErrInsufficientSize        Return = 7
	ErrInsufficientPower       Return = 8
	ErrDriverNotLoaded         Return = 9
	ErrTimeout                 Return = 10
	ErrIRQIssue                Return = 11
	ErrLibraryNotFound         Return = 12 // also: dlopen failed
	ErrFunctionNotFound        Return = 13 // also: dlsym failed
	ErrCorruptedInforom        Return = 14
	ErrGPUIsLost               Return = 15
	ErrResetRequired           Return = 16
	ErrOperatingSystem         Return = 17
	ErrLibRMVersionMismatch    Return = 18
	ErrInUse                   Return = 19
	ErrMemory                  Return = 20
	ErrNoData                  Return = 21
	ErrVGPUECCNotSupported     Return = 22
	ErrInsufficientResources   Return = 23
	ErrFreqNotSupported        Return = 24
	ErrArgumentVersionMismatch Return = 25
	ErrDeprecated              Return = 26
	ErrNotReady                Return = 27
	ErrGPUNotFound             Return = 28
	ErrInvalidState            Return = 29
	ErrResetTypeNotSupported   Return = 30
	ErrUnknown                 Return = 999
)

var returnNames = map[Return]string{
	Success:                    "NVML_SUCCESS",
	ErrUninitialized:           "NVML_ERROR_UNINITIALIZED",
	ErrInvalidArgument:         "NVML_ERROR_INVALID_ARGUMENT",
	ErrNotSupported:            "NVML_ERROR_NOT_SUPPORTED",
	ErrNoPermission:            "NVML_ERROR_NO_PERMISSION",
	ErrAlreadyInitialized:      "NVML_ERROR_ALREADY_INITIALIZED",
	ErrNotFound:                "NVML_ERROR_NOT_FOUND",
	ErrInsufficientSize:        "NVML_ERROR_INSUFFICIENT_SIZE",
	ErrInsufficientPower:       "NVML_ERROR_INSUFFICIENT_POWER",
	ErrDriverNotLoaded:         "NVML_ERROR_DRIVER_NOT_LOADED",
	ErrTimeout:                 "NVML_ERROR_TIMEOUT",
	ErrIRQIssue:                "NVML_ERROR_IRQ_ISSUE",
	ErrLibraryNotFound:         "NVML_ERROR_LIBRARY_NOT_FOUND",
	ErrFunctionNotFound:        "NVML_ERROR_FUNCTION_NOT_FOUND",
	ErrCorruptedInforom:        "NVML_ERROR_CORRUPTED_INFOROM",
	ErrGPUIsLost:               "NVML_ERROR_GPU_IS_LOST",
	ErrResetRequired:           "NVML_ERROR_RESET_REQUIRED",
	ErrOperatingSystem:         "NVML_ERROR_OPERATING_SYSTEM",
	ErrLibRMVersionMismatch:    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
	ErrInUse:                   "NVML_ERROR_IN_USE",
	ErrMemory:                  "NVML_ERROR_MEMORY",
	ErrNoData:                  "NVML_ERROR_NO_DATA",
	ErrVGPUECCNotSupported:     "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
	ErrInsufficientResources:   "NVML_ERROR_INSUFFICIENT_RESOURCES",
	ErrFreqNotSupported:        "NVML_ERROR_FREQ_NOT_SUPPORTED",
	ErrArgumentVersionMismatch: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
	ErrDeprecated:              "NVML_ERROR_DEPRECATED",
	ErrNotReady:                "NVML_ERROR_NOT_READY",
	ErrGPUNotFound:             "NVML_ERROR_GPU_NOT_FOUND",
	ErrInvalidState:            "NVML_ERROR_INVALID_STATE",
	ErrResetTypeNotSupported:   "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
	ErrUnknown:                 "NVML_ERROR_UNKNOWN",
}

// Error returns the code's name in nvml.h, e.g. "NVML_ERROR_NOT_FOUND", or
// "NVML error 31" for codes newer than this package.
func (r Return) Error() string {
	if name, ok := returnNames[r]; ok {
		return name
	}
	return "NVML error " + strconv.Itoa(int(r))
}

// CallError is a failed NVML call. It matches its Return with errors.Is.
type CallError struct {
	// Func is the NVML entry point, e.g. "nvmlDeviceGetHandleByPciBusId_v2".
	Func string
	// Return is what it returned.
	Return Return
	// Text is nvmlErrorString(Return), or "" where NVML was not asked.
	Text string
}

func (e *CallError) Error() string {
	if e.Text == "" {
		return e.Func + ": " + e.Return.Error()
	}
	return e.Func + ": " + e.Text + " (" + e.Return.Error() + ")"
}

// Unwrap returns e.Return.
func (e *CallError) Unwrap() error { return e.Return }
