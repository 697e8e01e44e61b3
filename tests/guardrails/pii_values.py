"""Realistic PII values for tests (all public test numbers or documentation examples)."""

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----"
)

VALUES = [
    ("EMAIL_ADDRESS", "maria.garcia+news@example.co.uk"),
    ("EMAIL_ADDRESS", "j.smith@mail.example.com"),
    ("PHONE_NUMBER", "+44 20 7946 0958"),
    ("PHONE_NUMBER", "+1 (415) 555-0132"),
    ("CREDIT_CARD", "4111 1111 1111 1111"),
    ("CREDIT_CARD", "5500-0000-0000-0004"),
    ("IBAN_CODE", "GB82 WEST 1234 5698 7654 32"),
    ("IBAN_CODE", "DE89370400440532013000"),
    ("US_SSN", "219-09-9999"),
    ("IP_ADDRESS", "192.168.10.25"),
    ("IP_ADDRESS", "2001:db8::8a2e:370:7334"),
    ("CRYPTO", "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"),
    ("API_KEY", "sk-proj-4f9Qa8ZbC2dE7gH1jK3mN5pRtUvWx"),
    ("API_KEY", "AKIAIOSFODNN7EXAMPLE"),
    ("API_KEY", "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"),
    ("JWT", JWT),
    ("PRIVATE_KEY", PRIVATE_KEY),
]
