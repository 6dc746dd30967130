//go:build amd64 && !purego

package aesgcm

import "golang.org/x/sys/cpu"

// hasKernels: the kernels of aesgcm_amd64.s need VAES and VPCLMULQDQ on
// 512-bit registers (AVX-512 F, BW for VPSHUFB, VL for the EVEX forms on
// XMM registers), and AES-NI and AVX for the key schedule.
var hasKernels = cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX &&
	cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ
