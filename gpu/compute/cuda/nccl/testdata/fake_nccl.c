/* A fake libnccl.so.2 for the loader's tests: one rank, host pointers.
 * It checks the calling convention (the 128-byte ncclUniqueId passed by
 * value, seven-argument collectives) and copies or sums on the host.
 *
 * Failure injection, set by the tests: with fake_nccl_hang set, a
 * collective is enqueued and never completes, as when another member died
 * mid-call: fake_nccl_pending stays 1 until ncclCommAbort (a test device's
 * sync waits on it, as cuCtxSynchronize waits for NCCL's kernel).
 * fake_nccl_async_error is what ncclCommGetAsyncError reports;
 * fake_nccl_aborts counts the aborts.
 *
 * ncclCommInitRankConfig (NCCL 2.14's non-blocking init) checks the
 * config's head and returns ncclInProgress; the communicator forms at the
 * first ncclCommGetAsyncError, or, with fake_nccl_init_hang set, never
 * (another member did not join) until ncclCommAbort. Built with
 * -DFAKE_NCCL_OLD it has no ncclCommInitRankConfig, as NCCL before 2.14. */
#include <stddef.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { int nranks, rank; } comm_t;
static comm_t the_comm;

int ncclGetVersion(int *v) { *v = 29999; return 0; }
int ncclGetUniqueId(ncclUniqueId *id) { memset(id, 0, sizeof *id); id->internal[0] = 42; id->internal[127] = 7; return 0; }
int ncclCommInitRank(comm_t **c, int n, ncclUniqueId id, int rank) {
	if (id.internal[0] != 42 || id.internal[127] != 7) return 4; /* ncclInvalidArgument */
	if (n != 1 || rank != 0) return 4;
	the_comm.nranks = n; the_comm.rank = rank; *c = &the_comm; return 0;
}
int ncclCommDestroy(comm_t *c) { return c == &the_comm ? 0 : 4; }
volatile int fake_nccl_hang, fake_nccl_pending, fake_nccl_async_error, fake_nccl_aborts;
volatile int fake_nccl_init_hang, fake_nccl_init_pending;
#ifndef FAKE_NCCL_OLD
typedef struct { size_t size; unsigned magic, version; int blocking, cga_cluster_size; } config_t;
int ncclCommInitRankConfig(comm_t **c, int n, ncclUniqueId id, int rank, config_t *cfg) {
	if (cfg == NULL || cfg->size < 20 || cfg->magic != 0xcafebeef || cfg->version < 21400 || cfg->blocking != 0) return 4;
	int r = ncclCommInitRank(c, n, id, rank);
	if (r != 0) return r;
	fake_nccl_init_pending = 1; return 7; /* ncclInProgress */
}
#endif
int ncclCommAbort(comm_t *c) {
	if (c != &the_comm) return 4;
	fake_nccl_aborts++; fake_nccl_pending = 0; fake_nccl_init_pending = 0; return 0;
}
int ncclCommGetAsyncError(comm_t *c, int *res) {
	if (c != &the_comm) return 4;
	if (fake_nccl_init_pending && !fake_nccl_init_hang) fake_nccl_init_pending = 0;
	*res = fake_nccl_async_error ? fake_nccl_async_error : fake_nccl_init_pending ? 7 : 0; return 0;
}
/* calls counts the collectives, for tests that check which path ran */
int fake_nccl_calls;
static size_t esize(int dt) { return dt == 7 ? 4 : dt == 9 ? 2 : 0; } /* ncclFloat32, ncclBfloat16 */
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, comm_t *c, void *stream) {
	if (c != &the_comm || esize(dt) == 0 || (op != 0 && op != 2 && op != 4)) return 4;
	if (fake_nccl_hang) { fake_nccl_pending = 1; fake_nccl_calls++; return 0; } /* enqueued; never completes */
	/* one rank: the sum, max and mean are the input */
	memmove(r, s, n * esize(dt)); (void)stream; fake_nccl_calls++; return 0;
}
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, comm_t *c, void *stream) {
	if (c != &the_comm || root != 0 || esize(dt) == 0) return 4; memmove(r, s, n * esize(dt)); fake_nccl_calls++; return 0;
}
int ncclAllGather(const void *s, void *r, size_t n, int dt, comm_t *c, void *stream) { memmove(r, s, n * 4); return 0; }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, comm_t *c, void *stream) { memmove(r, s, n * 4); return 0; }
const char *ncclGetErrorString(int r) {
	return r == 4 ? "invalid argument" : r == 6 ? "remote process exited or there was a network error" : "error";
}
