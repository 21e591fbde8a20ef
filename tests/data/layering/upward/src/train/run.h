#pragma once
#include "util/upward.h"
