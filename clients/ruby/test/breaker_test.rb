# frozen_string_literal: true

require "test_helper"

class BreakerTest < Minitest::Test
  def setup
    @now = 100.0
    @breaker = CiJobTelemetry::Breaker.new(threshold: 3, window: 10, cool_off: 30, clock: -> { @now })
  end

  def fail_times(count)
    count.times { @breaker.failure }
  end

  def test_opens_after_the_threshold_of_failures_within_the_window
    fail_times(2)
    assert_equal :closed, @breaker.state
    assert @breaker.allow?
    @breaker.failure
    assert_equal :open, @breaker.state
    refute @breaker.allow?
  end

  def test_failures_older_than_the_window_do_not_count
    fail_times(2)
    @now += 11
    @breaker.failure
    assert_equal :closed, @breaker.state
  end

  def test_a_success_forgets_the_failures_before_it
    fail_times(2)
    @breaker.success
    fail_times(2)
    assert_equal :closed, @breaker.state
  end

  def test_lets_one_probe_through_after_the_cool_off
    fail_times(3)
    @now += 29
    refute @breaker.allow?
    @now += 1
    assert_equal :half_open, @breaker.state
    assert @breaker.allow?, "the probe"
    refute @breaker.allow?, "the others are still skipped while the probe is out"
  end

  def test_a_failed_probe_opens_it_for_another_cool_off
    fail_times(3)
    @now += 30
    assert @breaker.allow?
    @breaker.failure
    assert_equal :open, @breaker.state
    @now += 29
    refute @breaker.allow?
  end

  def test_a_successful_probe_closes_it
    fail_times(3)
    @now += 30
    assert @breaker.allow?
    @breaker.success
    assert_equal :closed, @breaker.state
    assert @breaker.allow?
    assert @breaker.allow?
  end
end
