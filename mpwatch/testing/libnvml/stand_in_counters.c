/* TEST-ONLY: the stand-in libnvidia-ml.so.1's counters (testing.libnvml; the state is
 * stand_in.c's): each NVML call behind a counter of contract.gpu_counters answers that counter
 * as the script gives it, by its key: its value in NVML's units, or the failure scripted (a
 * GPU in MIG mode that does not report it is scripted NOT_SUPPORTED). A MIG device has no
 * counters of its own. A new counter whose NVML call is new here: one function below.
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

#define MEM_CLOCK 1593u /* MHz: an A100's HBM2e */

/* A counter of the whole GPU, by its key: NOT_SUPPORTED on a MIG device, as on a driver. */
static nvmlReturn_t counter(nvmlDevice_t h, const char *key, unsigned long long *value) {
    if (fn_mig_of(h, NULL)) return NVML_ERROR_NOT_SUPPORTED;
    const struct fn_dev *d = fn_dev_of(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_counter *c = fn_counter_of(d, key);
    if (!c) return NVML_ERROR_NOT_SUPPORTED;
    *value = c->value;
    return (nvmlReturn_t)c->fail;
}

/* The calls that answer one unsigned int. */
static nvmlReturn_t one(nvmlDevice_t h, const char *key, unsigned int *out) {
    unsigned long long v;
    nvmlReturn_t ret = counter(h, key, &v);
    if (ret != NVML_SUCCESS) return ret;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    unsigned long long gpu, mem;
    nvmlReturn_t ret = counter(device, "util_gpu", &gpu);
    if (ret == NVML_SUCCESS) ret = counter(device, "util_mem", &mem);
    if (ret != NVML_SUCCESS) return ret;
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = (unsigned)gpu;
    utilization->memory = (unsigned)mem;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                             unsigned int *temp) {
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return one(device, "temperature", temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    return one(device, "power_w", power);
}

/* The SM clock (the graphics clock is the same), now or at most; the memory clock is fixed. */
static nvmlReturn_t clock_of(nvmlDevice_t h, nvmlClockType_t type, const char *key, unsigned int *clock) {
    unsigned int sm;
    nvmlReturn_t ret = one(h, key, &sm);
    if (ret != NVML_SUCCESS) return ret;
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *clock = sm; return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *clock = MEM_CLOCK; return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    return clock_of(device, type, "sm_clock_mhz", clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    return clock_of(device, type, "sm_clock_max_mhz", clock);
}
