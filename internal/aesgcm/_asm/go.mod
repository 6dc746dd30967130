module troupe/internal/aesgcm/_asm

go 1.26

require github.com/mmcloughlin/avo v0.6.0

require (
	golang.org/x/mod v0.23.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
	golang.org/x/tools v0.30.0 // indirect
)
