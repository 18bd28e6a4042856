// Package logging owns mkernel's single zap logger: one level (from
// MKERNEL_LOG_LEVEL, changeable at run time), one format (MKERNEL_LOG_FORMAT:
// "console" or "json"), one sink (stderr). Python's records are written
// through Emit so Go and Python lines share that format.
package logging
