#pragma once
// An upward include for the layering check to find (util is the lowest layer).
#include "train/run.h"
