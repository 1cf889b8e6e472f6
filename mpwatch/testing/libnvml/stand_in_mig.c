/* TEST-ONLY: the stand-in libnvidia-ml.so.1's MIG calls (testing.libnvml; the state is
 * stand_in.c's): the mode, the MIG device handles of a GPU, their GPU and compute instance
 * ids, and the way back to the parent. A GPU with scripted instances is in MIG mode.
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

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    if (!fn_dev_of(device) || !currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &fn_script_now.gpus[device->index];
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = g->nmig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* One slot more than the instances made: an empty slot answers NOT_FOUND, as on a GPU
 * whose 7 slots are not all used. */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    if (!fn_dev_of(device) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &fn_script_now.gpus[device->index];
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned)g->nmig + 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice) {
    if (!fn_dev_of(device) || !migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fn_gpu *g = &fn_script_now.gpus[device->index];
    if (!g->nmig) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned)g->nmig) return NVML_ERROR_NOT_FOUND;
    *migDevice = &fn_migs[device->index][index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    if (!fn_valid(device) || !isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = device->mig != -1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    const struct fn_mig *m = fn_mig_of(device, NULL);
    if (!m || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    const struct fn_mig *m = fn_mig_of(device, NULL);
    if (!m || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    if (!fn_mig_of(migDevice, NULL) || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &fn_gpus[migDevice->index];
    return NVML_SUCCESS;
}
