// Package peers holds a cross-process benchmark that measures troupe's
// direct call path (troupe/runtime/wire) side by side with protoactor-go's
// remote request/response, in one run, with the same 64-byte payload.
//
// It is a nested Go module so that the main troupe module never depends on
// protoactor-go; see README.md for the command and the figures.
package peers
