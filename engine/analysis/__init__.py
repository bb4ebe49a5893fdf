"""Analysis over reports: facts, diagnosis rules, growth fits, cost/roofline, what-if, compare, metrics."""
