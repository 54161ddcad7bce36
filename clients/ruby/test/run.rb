# frozen_string_literal: true

# Runs several test files in one process: ruby -Ilib -Itest test/run.rb test/a_test.rb test/b_test.rb [-- -v]
# (minitest's own options after `--`).
files = ARGV.shift(ARGV.index("--") || ARGV.size)
ARGV.shift
files.each { |file| require File.expand_path(file) }
