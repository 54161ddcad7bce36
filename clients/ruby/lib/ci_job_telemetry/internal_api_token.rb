# frozen_string_literal: true

require "json"
require "openssl"

module CiJobTelemetry
  # The `Gitlab-Ci-Telemetry-Api-Request` header (SPEC §3), signed exactly as the service's Node signer signs
  # it (src/internal-api/internal-api-token.ts): HS256 over `{"alg":"HS256","typ":"JWT"}` and
  # `{"iss":…,"iat":…,"exp":iat+60}`, with the secret file's base64-decoded bytes as the key.
  #
  # Signed here with OpenSSL::HMAC rather than ruby-jwt: ten lines of the standard library give the same bytes as
  # the Node signer (ruby-jwt 2.5 writes the header's members in another order, so only a verify could compare),
  # and the client loads no gem. test/fixtures/internal-api-token-vector.json proves the bytes agree.
  class InternalApiToken
    HEADER_NAME = "Gitlab-Ci-Telemetry-Api-Request"
    # The service refuses a token whose `exp` has passed or whose `iat` is more than 60 s old.
    LIFETIME_SECONDS = 60
    MIN_SECRET_BYTES = 32
    JOSE_HEADER = '{"alg":"HS256","typ":"JWT"}'

    class InvalidSecret < StandardError; end

    # The secret as the service reads it: base64 text (surrounding whitespace ignored), at least 32 bytes.
    def self.read_secret(path)
      text = File.read(path).strip
      raise InvalidSecret, "#{path} must hold at least #{MIN_SECRET_BYTES} bytes, base64-encoded" unless text.match?(%r{\A[A-Za-z0-9+/]+={0,2}\z})

      secret = text.unpack1("m")
      raise InvalidSecret, "#{path} must hold at least #{MIN_SECRET_BYTES} bytes, base64-encoded" if secret.bytesize < MIN_SECRET_BYTES

      secret
    end

    def initialize(secret, issuer: "gitlab", clock: -> { Time.now.to_i })
      @secret = secret.b
      @issuer = issuer
      @clock = clock
      @encoded_header = base64url(JOSE_HEADER)
      @current = nil
    end

    # A token issued now. Signed once per second, not once per call: `iat` counts whole seconds, so a token
    # signed per call is this same string until the second turns (and the service then finds it among those it
    # has verified already). One frozen pair, replaced whole, so threads never see a token of another second.
    def current
      issued_at = @clock.call
      cached = @current
      return cached[1] if cached && cached[0] == issued_at

      token = sign(issued_at)
      @current = [issued_at, token].freeze
      token
    end

    def sign(issued_at)
      claims = %({"iss":#{JSON.generate(@issuer)},"iat":#{issued_at},"exp":#{issued_at + LIFETIME_SECONDS}})
      signing_input = "#{@encoded_header}.#{base64url(claims)}"
      "#{signing_input}.#{base64url(OpenSSL::HMAC.digest("SHA256", @secret, signing_input))}"
    end

    # Never the secret, whatever inspects the client (a log line, an exception report).
    def inspect
      "#<#{self.class.name} issuer=#{@issuer.inspect}>"
    end

    private

    def base64url(bytes)
      [bytes].pack("m0").tr("+/", "-_").delete("=")
    end
  end
end
