/* TEST-ONLY stand-in for the NVIDIA driver's libnvidia-ml.so.1, built against NVIDIA's own
 * nvml.h by testing.libnvml at test time, and loaded by the real nvidia-ml-py (pynvml), so
 * its ctypes structs, versioned entry points and special values run as on a GPU machine.
 * It answers the calls probes.gpu.NvmlBackend makes, from a scenario script read at nvmlInit
 * (the file named by MPWATCH_NVML_STAND_IN_SCRIPT; format in script.c). Calls may come from any
 * thread: the script is read once, at the first nvmlInit, and only read after that.
 *
 * Built with -DSTAND_IN_WITHOUT_V3 it lacks nvmlDeviceGetComputeRunningProcesses_v3, as a
 * driver older than R510 does.
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
#define _DEFAULT_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* define the _v2 and _v3 entry points by their own names */
#include <nvml.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "script.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId / computeInstanceId outside MIG */

/* A handle: the device's index, and which MIG slot (-1: the GPU itself). */
struct nvmlDevice_st {
    int index;
    int mig;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int inits;             /* nvmlInit minus nvmlShutdown: NVML counts them */
static struct fn_script script;
static double t0;             /* CLOCK_MONOTONIC at the first nvmlInit */
static struct nvmlDevice_st gpus[FN_MAX_GPUS], migs[FN_MAX_GPUS][FN_MAX_MIG + 1];

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The device behind a GPU handle now, or NULL (not started, or not a GPU handle). */
static const struct fn_dev *dev_of(nvmlDevice_t h) {
    if (!inits || !h || h->mig != -1 || h->index < 0 || h->index >= script.ngpus) return NULL;
    return fn_script_dev(&script, now_s(CLOCK_MONOTONIC) - t0, h->index);
}

/* ------------------------------------------------------------ start and stop ---- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (inits == 0) {
        const char *path = getenv("MPWATCH_NVML_STAND_IN_SCRIPT");
        if (!path) {
            ret = NVML_ERROR_DRIVER_NOT_LOADED; /* as on a machine without the kernel module */
        } else if (fn_script_load(path, &script) != 0) {
            ret = NVML_ERROR_UNKNOWN;
        } else if (script.init_error) {
            ret = (nvmlReturn_t)script.init_error;
            fn_script_free(&script);
        } else {
            t0 = now_s(CLOCK_MONOTONIC);
            for (int i = 0; i < FN_MAX_GPUS; i++) {
                gpus[i] = (struct nvmlDevice_st){i, -1};
                for (int m = 0; m <= FN_MAX_MIG; m++) migs[i][m] = (struct nvmlDevice_st){i, m};
            }
        }
    }
    if (ret == NVML_SUCCESS) inits++;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (inits == 0) ret = NVML_ERROR_UNINITIALIZED;
    else if (--inits == 0) fn_script_free(&script);
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* --------------------------------------------------------------- devices ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!inits) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)script.ngpus;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!inits) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)script.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t text(const char *value, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (!dev_of(device)) return NVML_ERROR_INVALID_ARGUMENT;
    return text(script.gpus[device->index].name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (!inits || !device || device->index < 0 || device->index >= script.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &script.gpus[device->index];
    if (device->mig < 0) return text(g->uuid, uuid, length);
    return device->mig < g->nmig ? text(g->mig[device->mig], uuid, length) : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_MEMORY]) return (nvmlReturn_t)d->fail[FN_MEMORY];
    unsigned long long total = script.gpus[device->index].mem_total;
    memory->total = total;
    memory->used = d->mem_used;
    memory->free = d->mem_used < total ? total - d->mem_used : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_UTILIZATION]) return (nvmlReturn_t)d->fail[FN_UTILIZATION];
    utilization->gpu = d->util_gpu;
    utilization->memory = d->util_mem;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                             unsigned int *temp) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_TEMPERATURE]) return (nvmlReturn_t)d->fail[FN_TEMPERATURE];
    *temp = d->temperature;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !power) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_POWER]) return (nvmlReturn_t)d->fail[FN_POWER];
    *power = d->power_mw;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- processes ---- */
/* The device's processes whose pid names resolve now; the count, at most max. */
static int live_procs(const struct fn_dev *d, pid_t *pids, const struct fn_proc **procs, int max) {
    int n = 0;
    for (int i = 0; i < d->nprocs && n < max; i++) {
        pid_t pid = fn_resolve_pid(d->procs[i].spec);
        if (pid) pids[n] = pid, procs[n++] = &d->procs[i];
    }
    return n;
}

/* NVML's two-call protocol: too small a buffer (or none) gets the count and
 * INSUFFICIENT_SIZE; no process at all is SUCCESS with a count of 0. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v2_t *infos, int v3) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (v3 && d->fail[FN_PROCESSES_V3]) return (nvmlReturn_t)d->fail[FN_PROCESSES_V3];
    if (d->fail[FN_PROCESSES]) return (nvmlReturn_t)d->fail[FN_PROCESSES];
    pid_t pids[256];
    const struct fn_proc *procs[256];
    int n = live_procs(d, pids, procs, 256);
    if (n == 0 || !infos || *count < (unsigned)n) {
        *count = (unsigned)n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        infos[i].pid = (unsigned)pids[i];
        infos[i].usedGpuMemory = procs[i]->mem == FN_NO_VALUE ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                                                              : (unsigned long long)procs[i]->mem;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = NO_INSTANCE;
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
 * NVML's CPU timestamps are); none newer than lastSeen is NOT_FOUND, as on a driver. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *count, unsigned long long lastSeen) {
    const struct fn_dev *d = dev_of(device);
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->proc_util) return NVML_ERROR_NOT_SUPPORTED;
    if (d->fail[FN_PROC_UTIL]) return (nvmlReturn_t)d->fail[FN_PROC_UTIL];
    unsigned long long stamp = (unsigned long long)(now_s(CLOCK_REALTIME) * 1e6);
    pid_t pids[256];
    const struct fn_proc *procs[256];
    int n = live_procs(d, pids, procs, 256), k = 0;
    for (int i = 0; i < n; i++)
        if (procs[i]->sm != FN_NO_VALUE) pids[k] = pids[i], procs[k++] = procs[i];
    if (k == 0 || stamp <= lastSeen) return NVML_ERROR_NOT_FOUND;
    if (!utilization || *count < (unsigned)k) {
        *count = (unsigned)k;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < k; i++) {
        memset(&utilization[i], 0, sizeof utilization[i]);
        utilization[i].pid = (unsigned)pids[i];
        utilization[i].timeStamp = stamp;
        utilization[i].smUtil = (unsigned)procs[i]->sm;
    }
    *count = (unsigned)k;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------- MIG ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    if (!dev_of(device) || !currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &script.gpus[device->index];
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = g->nmig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* One slot more than the instances made: an empty slot answers NOT_FOUND, as on a GPU
 * whose 7 slots are not all used. */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    if (!dev_of(device) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &script.gpus[device->index];
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned)g->nmig + 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice) {
    if (!dev_of(device) || !migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &script.gpus[device->index];
    if (!g->nmig) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned)g->nmig) return NVML_ERROR_NOT_FOUND;
    *migDevice = &migs[device->index][index];
    return NVML_SUCCESS;
}
