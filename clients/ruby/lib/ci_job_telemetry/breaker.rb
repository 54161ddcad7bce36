# frozen_string_literal: true

module CiJobTelemetry
  # A circuit breaker over the decorator: after `threshold` failed calls within `window` seconds it opens, and
  # calls are skipped (the payload goes out untouched at once) for `cool_off` seconds; then one call goes through
  # as a probe while the others are still skipped. The probe's success closes it, its failure opens it again.
  # While the service is down, a pickup pays nothing for it instead of a deadline each.
  class Breaker
    STATES = %i[closed open half_open].freeze

    def initialize(threshold: 5, window: 10.0, cool_off: 30.0, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      raise ArgumentError, "threshold must be at least 1" if threshold < 1

      @threshold = threshold
      @window = window
      @cool_off = cool_off
      @clock = clock
      @mutex = Mutex.new
      @state = :closed
      @failures = []
      @opened_at = nil
      @probing = false
    end

    # :closed, :open or :half_open (a probe may go, or is on its way).
    def state
      @mutex.synchronize do
        refresh
        @state
      end
    end

    # Whether this call may go to the service. In :half_open, only the first caller gets true: it is the probe,
    # and must report with #success or #failure.
    def allow?
      @mutex.synchronize do
        refresh
        case @state
        when :closed then true
        when :open then false
        when :half_open
          next false if @probing

          @probing = true
        end
      end
    end

    def success
      @mutex.synchronize do
        @state = :closed
        @probing = false
        @failures.clear
      end
    end

    def failure
      @mutex.synchronize do
        now = @clock.call
        if @state == :half_open
          open(now)
        else
          @failures << now
          @failures.shift while @failures.first <= now - @window
          open(now) if @failures.size >= @threshold
        end
      end
    end

    private

    def open(now)
      @state = :open
      @opened_at = now
      @probing = false
      @failures.clear
    end

    def refresh
      @state = :half_open if @state == :open && @clock.call - @opened_at >= @cool_off
    end
  end
end
