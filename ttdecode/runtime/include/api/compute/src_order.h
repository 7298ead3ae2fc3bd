#pragma once
#include "api/compute/common_globals.h"
