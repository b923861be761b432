package fuse

// Maximum file write size we are prepared to receive from the kernel.
//
// pbfs patch: 1 MiB, negotiated with FUSE_MAX_PAGES (kernel 4.20+); older
// kernels cap writes at 128 KiB (FUSE_MAX_PAGES_PER_REQ=32, 4 KiB pages).
// Fewer, larger writes make sequential throughput several times higher.
const maxWrite = 1 << 20
