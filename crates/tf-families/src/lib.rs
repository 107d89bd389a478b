//! Model families: config validation with named refusals, tensor maps and forward plans.
