/* TEST-ONLY: the stand-in libnvidia-ml.so.1's clock event reasons (testing.libnvml; the state
 * is stand_in.c's; the clocks themselves are counters, stand_in_counters.c): why the SM clock
 * is held back, once called throttle reasons: both names are answered, as a current driver
 * does; a driver older than R535 has only the throttle one. A MIG device has none of its own.
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

static nvmlReturn_t reasons(nvmlDevice_t h, unsigned long long *out) {
    if (fn_mig_of(h, NULL)) return NVML_ERROR_NOT_SUPPORTED;
    const struct fn_dev *d = fn_dev_of(h);
    if (!d || !out) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fail[FN_THROTTLE]) return (nvmlReturn_t)d->fail[FN_THROTTLE];
    *out = d->throttle;
    return NVML_SUCCESS;
}

#ifndef STAND_IN_WITHOUT_V3
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons) {
    return reasons(device, clocksEventReasons);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                             unsigned long long *clocksThrottleReasons) {
    return reasons(device, clocksThrottleReasons);
}
