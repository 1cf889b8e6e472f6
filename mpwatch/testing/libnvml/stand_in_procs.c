/* TEST-ONLY: the stand-in libnvidia-ml.so.1's process lists and per-process samples
 * (testing.libnvml; the state is stand_in.c's). A GPU lists its processes; in MIG mode it
 * lists every slice's, each with its GPU and compute instance ids, and only for root; a MIG
 * device lists its own to anyone, but the memory of another user's process only to root
 * (NVML_VALUE_NOT_AVAILABLE, as a driver keeps it from a user who does not own it).
 *
 * nvml.h is NVIDIA's, under the notice at its top, which asks that code using it carry this:
 *   NVIDIA MAKES NO REPRESENTATION ABOUT THE SUITABILITY OF THIS SOURCE CODE FOR ANY PURPOSE.
 *   IT IS PROVIDED "AS IS" WITHOUT EXPRESS OR IMPLIED WARRANTY OF ANY KIND. NVIDIA DISCLAIMS
 *   ALL WARRANTIES WITH REGARD TO THIS SOURCE CODE, INCLUDING ALL IMPLIED WARRANTIES OF
 *   MERCHANTABILITY, NONINFRINGEMENT, AND FITNESS FOR A PARTICULAR PURPOSE. IN NO EVENT SHALL
 *   NVIDIA BE LIABLE FOR ANY SPECIAL, INDIRECT, INCIDENTAL, OR CONSEQUENTIAL DAMAGES, OR ANY
 *   DAMAGES WHATSOEVER RESULTING FROM LOSS OF USE, DATA OR PROFITS, WHETHER IN AN ACTION OF
 *   CONTRACT, NEGLIGENCE OR OTHER TORTIOUS ACTION, ARISING OUT OF OR IN CONNECTION WITH THE
 *   USE OR PERFORMANCE OF THIS SOURCE CODE.
 *   U.S. Government End Users. This source code is a "commercial item" as that term is defined
 *   at 48 C.F.R. 2.101 (OCT 1995), consisting of "commercial computer software" and "commercial
 *   computer software documentation" as such terms are used in 48 C.F.R. 12.212 (SEPT 1995) and
 *   is provided to the U.S. Government only as a commercial end item. Consistent with 48
 *   C.F.R.12.212 and 48 C.F.R. 227.7202-1 through 227.7202-4 (JUNE 1995), all U.S. Government
 *   End Users acquire the source code with only those rights set forth herein.
 */
#include "stand_in.h"

#include <string.h>
#include <unistd.h>

#define MAX_LISTED 256

struct listed {
    pid_t pid;
    const struct fn_proc *proc;
    unsigned gi, ci;
};

/* The processes of d whose pid names resolve now, appended to out (n so far); the count. */
static int add_live(const struct fn_dev *d, unsigned gi, unsigned ci, struct listed *out, int n) {
    for (int i = 0; i < d->nprocs && n < MAX_LISTED; i++) {
        pid_t pid = fn_resolve_pid(d->procs[i].spec);
        if (pid) out[n++] = (struct listed){pid, &d->procs[i], gi, ci};
    }
    return n;
}

/* What a handle lists now; *fail: the scripted failure of the query (0: none). */
static int listing(nvmlDevice_t h, struct listed *out, int v3, nvmlReturn_t *fail) {
    const struct fn_dev *d = NULL;
    const struct fn_mig *m = fn_mig_of(h, &d);
    if (!m) d = fn_dev_of(h);
    if (!d) return *fail = NVML_ERROR_INVALID_ARGUMENT, 0;
    *fail = (nvmlReturn_t)(v3 && d->fail[FN_PROCESSES_V3] ? d->fail[FN_PROCESSES_V3] : d->fail[FN_PROCESSES]);
    if (*fail) return 0;
    if (m) return add_live(d, m->gi, m->ci, out, 0);
    if (fn_in_mig_mode(h) && !fn_privileged()) return *fail = NVML_ERROR_NO_PERMISSION, 0;
    int n = add_live(d, NO_INSTANCE, NO_INSTANCE, out, 0);
    const struct fn_gpu *g = &fn_script_now.gpus[h->index];
    for (int i = 0; i < d->nslices && i < g->nmig; i++) n = add_live(&d->slices[i], g->mig[i].gi, g->mig[i].ci, out, n);
    return n;
}

/* The memory a caller may see of a listed process. */
static unsigned long long shown_memory(nvmlDevice_t h, const struct listed *p) {
    long long mem = p->proc->mem;
    if (mem == FN_NO_VALUE) return (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
    if (fn_mig_of(h, NULL) && !fn_privileged() && fn_pid_uid(p->pid) != (long)geteuid())
        return (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
    return (unsigned long long)mem;
}

/* NVML's two-call protocol: too small a buffer (or none) gets the count and
 * INSUFFICIENT_SIZE; no process at all is SUCCESS with a count of 0. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v2_t *infos, int v3) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    struct listed found[MAX_LISTED];
    nvmlReturn_t fail;
    int n = listing(device, found, v3, &fail);
    if (fail) return fail;
    if (n == 0 || !infos || *count < (unsigned)n) {
        *count = (unsigned)n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        infos[i].pid = (unsigned)found[i].pid;
        infos[i].usedGpuMemory = shown_memory(device, &found[i]);
        infos[i].gpuInstanceId = found[i].gi;
        infos[i].computeInstanceId = found[i].ci;
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_v2_t *infos) {
    return processes(device, count, infos, 0);
}

#ifndef STAND_IN_WITHOUT_V3
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return processes(device, count, infos, 1);
}
#endif

/* One sample per process that ran a kernel, stamped now (microseconds of wall clock, as
 * NVML's CPU timestamps are); none newer than lastSeen is NOT_FOUND, as on a driver. A GPU
 * in MIG mode and its slices keep no process samples. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *count, unsigned long long lastSeen) {
    if (fn_mig_of(device, NULL) || fn_in_mig_mode(device)) return NVML_ERROR_NOT_SUPPORTED;
    const struct fn_dev *d = fn_dev_of(device);
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->proc_util) return NVML_ERROR_NOT_SUPPORTED;
    if (d->fail[FN_PROC_UTIL]) return (nvmlReturn_t)d->fail[FN_PROC_UTIL];
    unsigned long long stamp = (unsigned long long)(fn_wall() * 1e6);
    struct listed found[MAX_LISTED];
    int n = add_live(d, NO_INSTANCE, NO_INSTANCE, found, 0), k = 0;
    for (int i = 0; i < n; i++)
        if (found[i].proc->sm != FN_NO_VALUE) found[k++] = found[i];
    if (k == 0 || stamp <= lastSeen) return NVML_ERROR_NOT_FOUND;
    if (!utilization || *count < (unsigned)k) {
        *count = (unsigned)k;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < k; i++) {
        memset(&utilization[i], 0, sizeof utilization[i]);
        utilization[i].pid = (unsigned)found[i].pid;
        utilization[i].timeStamp = stamp;
        utilization[i].smUtil = (unsigned)found[i].proc->sm;
    }
    *count = (unsigned)k;
    return NVML_SUCCESS;
}
