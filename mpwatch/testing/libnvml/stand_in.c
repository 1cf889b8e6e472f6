/* TEST-ONLY stand-in for the NVIDIA driver's libnvidia-ml.so.1, built against NVIDIA's own
 * nvml.h by testing.libnvml at test time, and loaded by the real nvidia-ml-py (pynvml), so
 * its ctypes structs, versioned entry points and special values run as on a GPU machine.
 * It answers the calls probes.nvml.NvmlBackend makes, from a scenario script read at nvmlInit
 * (the file named by MPWATCH_NVML_STAND_IN_SCRIPT; format in script.c). Calls may come from any
 * thread: the script is read once, at the first nvmlInit, and only read after that.
 * This file: start and stop, error strings, devices and memory; the counters are in
 * stand_in_counters.c, the process lists in stand_in_procs.c, MIG in stand_in_mig.c, the clock
 * event reasons in stand_in_clocks.c.
 *
 * Built with -DSTAND_IN_WITHOUT_V3 it is the library of a driver older than R510: no
 * nvmlDeviceGetComputeRunningProcesses_v3, no nvmlDeviceGetMemoryInfo_v2, no clock event reasons.
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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
int fn_inits;
struct fn_script fn_script_now;
struct nvmlDevice_st fn_gpus[FN_MAX_GPUS], fn_migs[FN_MAX_GPUS][FN_MAX_MIG + 1];
static double t0; /* CLOCK_MONOTONIC at the first nvmlInit */

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double fn_elapsed(void) { return now_s(CLOCK_MONOTONIC) - t0; }
double fn_wall(void) { return now_s(CLOCK_REALTIME); }
int fn_privileged(void) { return geteuid() == 0; }

int fn_valid(nvmlDevice_t h) {
    return fn_inits && h && h->index >= 0 && h->index < fn_script_now.ngpus
           && (h->mig == -1 || (h->mig >= 0 && h->mig < fn_script_now.gpus[h->index].nmig));
}

const struct fn_dev *fn_dev_of(nvmlDevice_t h) {
    if (!fn_valid(h) || h->mig != -1) return NULL;
    return fn_script_dev(&fn_script_now, fn_elapsed(), h->index);
}

const struct fn_mig *fn_mig_of(nvmlDevice_t h, const struct fn_dev **values) {
    if (!fn_valid(h) || h->mig == -1) return NULL;
    if (values) *values = fn_script_slice(&fn_script_now, fn_elapsed(), h->index, h->mig);
    return &fn_script_now.gpus[h->index].mig[h->mig];
}

int fn_in_mig_mode(nvmlDevice_t h) { return fn_valid(h) && fn_script_now.gpus[h->index].nmig > 0; }

/* ------------------------------------------------------------ start and stop ---- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (fn_inits == 0) {
        const char *path = getenv("MPWATCH_NVML_STAND_IN_SCRIPT");
        if (!path) {
            ret = NVML_ERROR_DRIVER_NOT_LOADED; /* as on a machine without the kernel module */
        } else if (fn_script_load(path, &fn_script_now) != 0) {
            ret = NVML_ERROR_UNKNOWN;
        } else if (fn_script_now.init_error) {
            ret = (nvmlReturn_t)fn_script_now.init_error;
            fn_script_free(&fn_script_now);
        } else {
            t0 = now_s(CLOCK_MONOTONIC);
            for (int i = 0; i < FN_MAX_GPUS; i++) {
                fn_gpus[i] = (struct nvmlDevice_st){i, -1};
                for (int m = 0; m <= FN_MAX_MIG; m++) fn_migs[i][m] = (struct nvmlDevice_st){i, m};
            }
        }
    }
    if (ret == NVML_SUCCESS) fn_inits++;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (fn_inits == 0) ret = NVML_ERROR_UNINITIALIZED;
    else if (--fn_inits == 0) fn_script_free(&fn_script_now);
    pthread_mutex_unlock(&lock);
    return ret;
}

/* Every code nvml.h names, in words (pynvml asks the library for the codes it does not know). */
EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error"; /* a code newer than this nvml.h */
    }
}

/* --------------------------------------------------------------- devices ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!fn_inits) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)fn_script_now.ngpus;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!fn_inits) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)fn_script_now.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &fn_gpus[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t text(const char *value, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* A MIG device is named as a driver names it: its GPU's name, "MIG" and its profile. */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (!fn_valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &fn_script_now.gpus[device->index];
    if (device->mig == -1) return text(g->name, name, length);
    char both[FN_TEXT * 2];
    snprintf(both, sizeof both, "%s MIG %s", g->name, g->mig[device->mig].profile);
    return text(both, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (!fn_valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &fn_script_now.gpus[device->index];
    return text(device->mig == -1 ? g->uuid : g->mig[device->mig].uuid, uuid, length);
}

/* ---------------------------------------------------------------- memory ---- */
/* A GPU's or a MIG device's memory: allocated (used) and the driver's reserve apart. A GPU in
 * MIG mode adds its slices up, and only for root (its slices answer anyone). */
static nvmlReturn_t memory_of(nvmlDevice_t h, int v2, unsigned long long *total, unsigned long long *used,
                              unsigned long long *reserved) {
    const struct fn_dev *d = NULL;
    const struct fn_mig *m = fn_mig_of(h, &d);
    if (!m) d = fn_dev_of(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_MEMORY]) return (nvmlReturn_t)d->fail[FN_MEMORY];
    if (v2 && d->fail[FN_MEMORY_V2]) return (nvmlReturn_t)d->fail[FN_MEMORY_V2];
    if (!m && fn_in_mig_mode(h) && !fn_privileged()) return NVML_ERROR_NO_PERMISSION;
    *total = m ? m->mem_total : fn_script_now.gpus[h->index].mem_total;
    *used = d->mem_used;
    *reserved = d->reserved;
    for (int i = 0; !m && i < d->nslices; i++) *used += d->slices[i].mem_used, *reserved += d->slices[i].reserved;
    return NVML_SUCCESS;
}

/* v1 counts the driver's reserve as used, as drivers do. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned long long total, used, reserved;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t ret = memory_of(device, 0, &total, &used, &reserved);
    if (ret != NVML_SUCCESS) return ret;
    memory->total = total;
    memory->used = used + reserved;
    memory->free = memory->used < total ? total - memory->used : 0;
    return NVML_SUCCESS;
}

#ifndef STAND_IN_WITHOUT_V3
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    unsigned long long total, used, reserved;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t ret = memory_of(device, 1, &total, &used, &reserved);
    if (ret != NVML_SUCCESS) return ret;
    memory->total = total;
    memory->used = used;
    memory->reserved = reserved;
    memory->free = used + reserved < total ? total - used - reserved : 0;
    return NVML_SUCCESS;
}
#endif
