#pragma once

#include "api/compute/common_globals.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/cb_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
